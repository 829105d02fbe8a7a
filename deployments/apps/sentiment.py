"""A tiny lexicon sentiment model: pure Python, configured through user_config.

The word lists and the decision threshold come from `user_config`, so
tuning the model is an in-place `reconfigure()`, not a restart. With
`init_kwargs = { model = "NAME" }` they come first from that model's
`lexicon.json` (a `[models.NAME]` the backend lists, pinned by digest in git:
docs/guides/models.md, `gitops init --example models`), and `user_config`
overrides them key by key. The text is read from a JSON body `{"text": ...}`
or from the `text` query parameter.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from ray_gitops import serving

_WORD = re.compile(r"[a-z']+")
_NEGATIONS = frozenset({"not", "no", "never", "isn't", "wasn't", "don't"})


_DEFAULT_CONFIG: dict[str, Any] = {"positive": ["good"], "negative": ["bad"], "threshold": 0.0}


class SentimentModel:
    def __init__(self, model: str | None = None) -> None:
        # The lexicon before any user_config: the model's, else a minimal one.
        self.lexicon = _DEFAULT_CONFIG if model is None else _read_lexicon(model)
        self.reconfigure({})

    def reconfigure(self, user_config: dict[str, Any]) -> None:
        # A key of user_config replaces the lexicon's; the others stay.
        config = {**self.lexicon, **user_config}
        self.positive: frozenset[str]
        self.negative: frozenset[str]
        self.positive = frozenset(word.lower() for word in config.get("positive", []))
        self.negative = frozenset(word.lower() for word in config.get("negative", []))
        self.threshold = float(config.get("threshold", 0.0))

    def score(self, text: str) -> float:
        """Mean polarity per word in [-1, 1]; a negation flips the next word."""
        words = _WORD.findall(text.lower())
        total, flip = 0, 1
        for word in words:
            if word in _NEGATIONS:
                flip = -1
                continue
            total += flip * ((word in self.positive) - (word in self.negative))
            flip = 1
        return total / len(words) if words else 0.0

    def label(self, score: float) -> str:
        if score > self.threshold:
            return "positive"
        if score < -self.threshold:
            return "negative"
        return "neutral"

    async def __call__(self, request: Request) -> JSONResponse:
        text = await _text_of(request)
        if text is None:
            return JSONResponse({"error": "send JSON {\"text\": ...} or ?text=..."}, status_code=400)
        score = self.score(text)
        return JSONResponse({"label": self.label(score), "score": round(score, 4)})

    def check_health(self) -> None:
        if not (self.positive and self.negative):
            raise RuntimeError("sentiment lexicon is empty: set user_config.positive and .negative")


def _read_lexicon(model: str) -> dict[str, Any]:
    """`lexicon.json` of model `model`: staged and verified against its digest before this replica started."""
    lexicon = json.loads((Path(serving.model_path(model)) / "lexicon.json").read_text())
    return {key: lexicon[key] for key in ("positive", "negative", "threshold") if key in lexicon}


async def _text_of(request: Request) -> str | None:
    if "text" in request.query_params:
        return request.query_params["text"]
    try:
        payload = json.loads(await request.body() or b"null")
    except ValueError:
        return None
    text = payload.get("text") if isinstance(payload, dict) else None
    return text if isinstance(text, str) else None
