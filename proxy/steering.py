"""Which backend a request goes to before and instead of a random draw: header match, sticky key.

An endpoint's `[[match]]` rules are checked in order; the first whose header
carries exactly its value names the backend. Otherwise a sticky endpoint
hashes the request's key (a header or a cookie) to a fixed point in [0, 1)
and uses it as the draw into the weights (`vocabulary.choosing.WeightedChoice`),
so one key always lands on one backend while the keys as a whole follow the
weights exactly. When weights move (a rollout), a key only ever moves toward
the backend gaining weight. A request without the key is drawn at random.

Pure: headers in, a backend name or a draw out; no I/O.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Sequence

from vocabulary.configs import EndpointConfig, StickyKey

__all__ = ["Headers", "Steering", "sticky_point", "cookie_value"]

Headers = Sequence[tuple[bytes, bytes]]
_SCALE = float(2**64)


def sticky_point(key: bytes) -> float:
    """A key's fixed point in [0, 1), uniform over keys."""
    digest = hashlib.blake2b(key, digest_size=8).digest()
    return int.from_bytes(digest, "big") / _SCALE


def cookie_value(header: bytes, name: bytes) -> bytes | None:
    """The value of cookie `name` in a `Cookie` header, or None."""
    for pair in header.split(b";"):
        key, sep, value = pair.strip().partition(b"=")
        if sep and key == name:
            return value.strip(b'"')
    return None


@dataclass(frozen=True)
class Steering:
    """An endpoint's match rules and sticky key, ready for the request path.
    Header names are lower case bytes, as ASGI gives them."""

    rules: tuple[tuple[bytes, bytes, str], ...] = ()
    sticky_kind: StickyKey | None = None
    sticky_name: bytes = b""

    @classmethod
    def from_config(cls, config: EndpointConfig) -> Steering:
        rules = tuple((r.header.encode("latin-1"), r.value.encode("latin-1"), r.backend) for r in config.match)
        key = config.sticky_key()
        if key is None:
            return cls(rules)
        return cls(rules, key[0], key[1].encode("latin-1"))

    def __bool__(self) -> bool:
        return bool(self.rules) or self.sticky_kind is not None

    def matched(self, headers: Headers) -> str | None:
        """The backend of the first rule whose header has its value."""
        for name, value, backend in self.rules:
            if any(key == name and found == value for key, found in headers):
                return backend
        return None

    def point(self, headers: Headers) -> float | None:
        """The sticky draw for this request; None when it carries no key."""
        key = self._key(headers)
        return None if key is None else sticky_point(key)

    def _key(self, headers: Headers) -> bytes | None:
        if self.sticky_kind is StickyKey.HEADER:
            return next((value for key, value in headers if key == self.sticky_name), None)
        if self.sticky_kind is StickyKey.COOKIE:
            for key, value in headers:
                found = cookie_value(value, self.sticky_name) if key == b"cookie" else None
                if found is not None:
                    return found
        return None
