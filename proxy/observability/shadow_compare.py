"""Shadow replies compared with the primary's, and a bounded sample of the mismatches.

`compare` is pure: two replies (`Answer`: status, headers, body) and the endpoint's mode in, a
`Comparison` (match or mismatch, and a one-line diff) out. Modes: `status`
compares status codes; `json` also compares the bodies as JSON with the
`shadow_ignore` keys left out at any depth; `exact` compares status and
body bytes. A diff names where the bodies differ (a JSON path, a byte
offset) and the JSON types there, never the values (users' data) unless
the endpoint opts in (`shadow_values`). Bodies are read through their view
(`proxy.observability.bodies.BodyView`): `exact` compares them piece against
piece, never joined; `json` parses each as one buffer, a body's one piece
uncopied, and a body past `PARSED_MAX_BYTES` (more than any answer the data
link carries) is compared as bytes instead of parsed. `MismatchLog` keeps the most
recent mismatches (path, both statuses, the diff) for the admin API and
the status page; it holds no bodies, only the short diff. The proxy compares after the primary's reply
has been sent, so a comparison never delays it.
"""

from __future__ import annotations

import collections
import json
from dataclasses import asdict, dataclass
from typing import Any, Callable

from proxy.observability.bodies import BodyView
from vocabulary.spec.endpoints import ShadowCompare

__all__ = ["Comparison", "Mismatch", "MismatchLog", "compare", "Answer", "DIFF_LIMIT", "PARSED_MAX_BYTES"]

DIFF_LIMIT = 200  # characters of a diff kept per mismatch
# A body parsed as JSON is at most this long: the largest answer the data link carries (its frame bound).
PARSED_MAX_BYTES = 100 * 1024 * 1024
Headers = list[tuple[bytes, bytes]]
Answer = tuple[int, Headers, bytes | BodyView]  # a reply as compared: status, headers, body (bytes or a view)
_MISSING = object()


@dataclass(frozen=True)
class Comparison:
    matched: bool
    diff: str = ""


_MATCH = Comparison(True)


def compare(
    mode: ShadowCompare, ignore: frozenset[str], primary: Answer, shadow: Answer, values: bool = False
) -> Comparison:
    """`values`: the diff shows the differing JSON values; else their paths and types only."""
    if primary[0] != shadow[0]:
        return Comparison(False, f"status {primary[0]} != {shadow[0]}")
    if mode is ShadowCompare.JSON:
        return _compare_json(ignore, BodyView.of(primary[2]), BodyView.of(shadow[2]), _show if values else _kind)
    if mode is ShadowCompare.EXACT:
        return _compare_bytes(BodyView.of(primary[2]), BodyView.of(shadow[2]))
    return _MATCH


def _compare_bytes(primary: BodyView, shadow: BodyView) -> Comparison:
    offset = primary.differs_at(shadow)
    if offset is None:
        return _MATCH
    return Comparison(False, f"bodies differ from byte {offset} ({len(primary)} vs {len(shadow)} bytes)")


def _compare_json(ignore: frozenset[str], primary: BodyView, shadow: BodyView, show: Callable[[Any], str]) -> Comparison:
    left_text, right_text = primary.whole(PARSED_MAX_BYTES), shadow.whole(PARSED_MAX_BYTES)
    if left_text is None or right_text is None:
        return _MATCH if primary.same(shadow) else Comparison(False, "bodies differ and are too large to parse as JSON")
    try:
        left, right = json.loads(left_text), json.loads(right_text)
    except ValueError:
        return _MATCH if primary.same(shadow) else Comparison(False, "bodies differ and are not both JSON")
    found = _first_difference("$", _without(left, ignore), _without(right, ignore), show)
    return _MATCH if found is None else Comparison(False, found[: DIFF_LIMIT])


def _without(value: Any, ignore: frozenset[str]) -> Any:
    if isinstance(value, dict):
        return {k: _without(v, ignore) for k, v in value.items() if k not in ignore}
    if isinstance(value, list):
        return [_without(item, ignore) for item in value]
    return value


def _first_difference(path: str, left: Any, right: Any, show: Callable[[Any], str]) -> str | None:
    """Where two JSON values first differ, as `$.a[2].b: 1 != 2` (each side as `show` puts it); None when equal."""
    if isinstance(left, dict) and isinstance(right, dict):
        for key in sorted(set(left) | set(right)):
            found = _first_difference(f"{path}.{key}", left.get(key, _MISSING), right.get(key, _MISSING), show)
            if found is not None:
                return found
        return None
    if isinstance(left, list) and isinstance(right, list):
        if len(left) != len(right):
            return f"{path}: {len(left)} items != {len(right)} items"
        for index, (a, b) in enumerate(zip(left, right)):
            found = _first_difference(f"{path}[{index}]", a, b, show)
            if found is not None:
                return found
        return None
    # JSON has one number type (1 == 1.0) but true is not 1.
    if left == right and isinstance(left, bool) == isinstance(right, bool):
        return None
    shown_left, shown_right = show(left), show(right)
    if shown_left == shown_right:  # types alike: the values differ, and are not shown
        return f"{path}: {shown_left} values differ"
    return f"{path}: {shown_left} != {shown_right}"


def _kind(value: Any) -> str:
    """A JSON value's type, not its value: what a mismatch shows by default."""
    if value is _MISSING:
        return "(missing)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _show(value: Any) -> str:
    if value is _MISSING:
        return "(missing)"
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True)
class Mismatch:
    """One shadow reply that differed from the primary's."""

    at: float  # wall clock, seconds
    endpoint: str
    backend: str
    path: str
    primary_status: int
    shadow_status: int
    diff: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class MismatchLog:
    """The newest `size` mismatches, oldest dropped first."""

    def __init__(self, size: int = 50) -> None:
        self._recent: collections.deque[Mismatch] = collections.deque(maxlen=size)

    def record(self, mismatch: Mismatch) -> None:
        self._recent.append(mismatch)

    def recent(self) -> list[Mismatch]:
        """Newest first."""
        return list(reversed(self._recent))
