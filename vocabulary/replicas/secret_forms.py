"""The forms a secret value takes in text, so a redactor can mask every one.

A value leaks not only as itself: `int(value)` puts its `repr` in the
exception's message, a log line may hold it base64- or URL-encoded, a JSON
document escaped. `secret_forms(value)` gives each form worth masking
(the text, its `repr`, `bytes` `repr`, JSON, standard and URL-safe base64
with and without padding, percent-encoding), shorter ones than
`MIN_SECRET` left out (they would mask ordinary words), and each line of
a multi-line value on its own; `mask(text, forms)` replaces them, longest
first. Pure; the agent (`gitops.redaction`) and the replica
(`replica.secrets`) both use it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

__all__ = ["MASK", "MIN_SECRET", "secret_forms", "mask", "longest_first"]

MASK = "***"
MIN_SECRET = 4


def secret_forms(value: bytes | str) -> frozenset[str]:
    """Every form of `value` worth masking (none shorter than `MIN_SECRET`)."""
    raw = value.encode() if isinstance(value, str) else value
    text = raw.decode("utf-8", errors="replace")
    texts = {text, text.strip(), *(line.strip() for line in text.splitlines())}
    forms: set[str] = set()
    for each in texts:
        if len(each) < MIN_SECRET:
            continue
        data = each.encode()
        forms |= {
            each,
            repr(each)[1:-1],
            repr(data)[2:-1],
            json.dumps(each)[1:-1],
            quote(each, safe=""),
            quote_plus(each, safe=""),
            base64.b64encode(data).decode(),
            base64.b64encode(data).decode().rstrip("="),
            base64.urlsafe_b64encode(data).decode(),
            base64.urlsafe_b64encode(data).decode().rstrip("="),
        }
    return frozenset(form for form in forms if len(form) >= MIN_SECRET)


def longest_first(forms: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(forms), key=len, reverse=True))


def mask(text: str, forms: tuple[str, ...]) -> str:
    """`text` with each of `forms` (longest first, as `longest_first` orders them) as `MASK`."""
    for form in forms:
        if form in text:
            text = text.replace(form, MASK)
    return text
