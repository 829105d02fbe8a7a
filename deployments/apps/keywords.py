"""Keyword extraction as plain synchronous functions (no class, no state).

`extract` ranks single words by frequency; `extract_phrases` is a candidate
that also ranks two-word phrases. The endpoint shadows a share of its
traffic to the candidate so its answers can be compared without users
seeing them.
"""

from __future__ import annotations

import re
from collections import Counter

from starlette.requests import Request

_WORD = re.compile(r"[a-z][a-z'-]+")
_STOP_WORDS = frozenset(
    "a an and are as at be but by for from has have in is it its of on or that the this to was were will with".split()
)
_TOP = 5


def _words(request: Request) -> list[str]:
    text = request.query_params.get("text", "")
    return [word for word in _WORD.findall(text.lower()) if word not in _STOP_WORDS]


def extract(request: Request) -> dict[str, list[str]]:
    counts = Counter(_words(request))
    return {"keywords": [word for word, _ in counts.most_common(_TOP)]}


def extract_phrases(request: Request) -> dict[str, list[str]]:
    words = _words(request)
    counts = Counter(words) + Counter(f"{a} {b}" for a, b in zip(words, words[1:]))
    ranked = sorted(counts.items(), key=lambda item: (-item[1], -len(item[0]), item[0]))
    return {"keywords": [term for term, _ in ranked[:_TOP]]}
