"""Which backend a request goes to before and instead of a random draw: header or JSON match, sticky key.

An endpoint's `[[match]]` rules are checked in order; the first whose header
(or top-level JSON body field, `vocabulary.request_path.request_keys.json_key`) carries
exactly its value names the backend. Before the body is read, a JSON rule
cannot match, so the rules are checked again once it is (`reads_body`). Otherwise a sticky endpoint
hashes the request's key (a header or a cookie) to a fixed point in [0, 1)
and uses it as the draw into the weights (`vocabulary.request_path.choosing.WeightedChoice`),
so one key always lands on one backend while the keys as a whole follow the
weights exactly. When weights move (a rollout), a key only ever moves toward
the backend gaining weight. A request without the key is drawn at random.

Pure: headers (and a body already read) in, a backend name or a draw out; no I/O.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Sequence

from vocabulary.request_path.request_keys import cookie_value, json_key
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.keys import KeyKind

__all__ = ["Headers", "Steering", "sticky_point", "cookie_value"]

Headers = Sequence[tuple[bytes, bytes]]
_SCALE = float(2**64)


def sticky_point(key: bytes) -> float:
    """A key's fixed point in [0, 1), uniform over keys."""
    digest = hashlib.blake2b(key, digest_size=8).digest()
    return int.from_bytes(digest, "big") / _SCALE


@dataclass(frozen=True)
class Steering:
    """An endpoint's match rules and sticky key, ready for the request path.
    Header names are lower case bytes, as ASGI gives them."""

    # (header name, value, backend); a JSON rule has b"" for the name and its field in `json_rules`.
    rules: tuple[tuple[bytes, bytes, str], ...] = ()
    sticky_kind: KeyKind | None = None
    sticky_name: bytes = b""
    # Index in `rules` -> the JSON field that rule reads.
    json_rules: tuple[tuple[int, str], ...] = ()

    @classmethod
    def from_config(cls, config: EndpointConfig) -> Steering:
        rules = tuple(
            ((r.header or "").encode("latin-1"), r.value.encode("utf-8"), r.backend) for r in config.match
        )
        json_rules = tuple((i, r.json_field) for i, r in enumerate(config.match) if r.json_field is not None)
        key = config.sticky_key()
        if key is None:
            return cls(rules, json_rules=json_rules)
        return cls(rules, key[0], key[1].encode("latin-1"), json_rules)

    # Whether any rule or a sticky key can decide before the weights do: read on every request,
    # so worked out once (`__post_init__`), not asked each time.
    steers: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "steers", bool(self.rules) or self.sticky_kind is not None)

    @property
    def reads_body(self) -> bool:
        return bool(self.json_rules)

    def matched(self, headers: Headers, body: bytes | None = None) -> str | None:
        """The backend of the first rule whose header (or JSON field) has its value.
        Without a body (not read yet), no rule from the first JSON rule on matches."""
        fields = dict(self.json_rules)
        values: dict[str, bytes | None] = {}
        for index, (name, value, backend) in enumerate(self.rules):
            field = fields.get(index)
            if field is None:
                if any(key == name and found == value for key, found in headers):
                    return backend
                continue
            if body is None:
                return None
            if field not in values:
                values[field] = json_key(body, field)
            if values[field] == value:
                return backend
        return None

    def point(self, headers: Headers) -> float | None:
        """The sticky draw for this request; None when it carries no key."""
        key = self._key(headers)
        return None if key is None else sticky_point(key)

    def _key(self, headers: Headers) -> bytes | None:
        if self.sticky_kind is KeyKind.HEADER:
            return next((value for key, value in headers if key == self.sticky_name), None)
        if self.sticky_kind is KeyKind.COOKIE:
            for key, value in headers:
                found = cookie_value(value, self.sticky_name) if key == b"cookie" else None
                if found is not None:
                    return found
        return None
