"""Push-webhook checks: GitHub-style HMAC-SHA256 signatures, replays and a rate limit.

Pure: no HTTP, no clock of its own (the limiter is given the time). The
admin app turns a `Verdict` into a status code; a verified webhook only
ever triggers a fetch, so nothing in the payload is trusted or read.
`DeliveryLog` remembers the recent accepted deliveries, so a captured
delivery sent again is refused before it can drain the rate limit; given a
`store`, it hands its keys over after each record (`gitops run` keeps them
in the state dir, `StateDir.webhook_deliveries`, and `restore`s them at
start), so a delivery is refused after a restart too.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from gitops.admin.auth.access import read_token

__all__ = [
    "Verdict", "verify", "sign", "RateLimiter", "DeliveryLog", "read_secret",
    "SIGNATURE_HEADER", "DELIVERY_HEADER", "MAX_BODY_BYTES",
]

SIGNATURE_HEADER = "X-Hub-Signature-256"
DELIVERY_HEADER = "X-GitHub-Delivery"
MAX_BODY_BYTES = 1 << 20  # GitHub caps payloads at 25 MB; a push we only need to notice.
_PREFIX = "sha256="


class Verdict(str, enum.Enum):
    VALID = "valid"
    MISSING = "missing"  # -> 401
    INVALID = "invalid"  # -> 403


def sign(secret: bytes, body: bytes) -> str:
    """The header value a sender computes: `sha256=<hex hmac>`."""
    return _PREFIX + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify(secret: bytes, body: bytes, header: str | None) -> Verdict:
    if not header:
        return Verdict.MISSING
    # compare_digest on the whole header: constant time, prefix included.
    expected = sign(secret, body).encode()
    return Verdict.VALID if hmac.compare_digest(expected, header.strip().encode()) else Verdict.INVALID


def read_secret(path: str | Path) -> bytes:
    """The secret file's content without trailing newline; errors say which file."""
    return read_token(path, "--webhook-secret-file")


@dataclass
class RateLimiter:
    """A token bucket: `burst` requests at once, refilled at `per_second`."""

    per_second: float = 1.0
    burst: int = 5
    _tokens: float = field(default=-1.0, init=False)
    _last: float = field(default=0.0, init=False)

    def allow(self, now: float) -> bool:
        if self._tokens < 0:
            self._tokens, self._last = float(self.burst), now
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.per_second)
        self._last = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False

    def retry_after(self) -> float:
        return max(0.0, (1 - self._tokens) / self.per_second)


@dataclass
class DeliveryLog:
    """The last `capacity` accepted deliveries, by delivery id and by body digest.

    The id header is not covered by the signature, so a replay with a fresh
    id is still caught by its (signed) body; a forge's redelivery of a call
    that was refused (rate limit) is let through, as it was never recorded.
    """

    capacity: int = 1024
    store: Callable[[list[str]], None] | None = None  # told every key after each record, oldest first
    _seen: OrderedDict[str, None] = field(default_factory=OrderedDict, init=False)

    def seen(self, delivery: str | None, body: bytes) -> bool:
        return any(key in self._seen for key in _keys(delivery, body))

    def record(self, delivery: str | None, body: bytes) -> None:
        self._add(_keys(delivery, body))
        if self.store is not None:
            self.store(list(self._seen))

    def restore(self, keys: Iterable[str]) -> None:
        """Remember the keys a `store` was given (by an earlier process); anything else is skipped."""
        self._add(key for key in keys if key.startswith(("body:", "id:")) and len(key) <= 300)

    def _add(self, keys: Iterable[str]) -> None:
        for key in keys:
            self._seen[key] = None
            self._seen.move_to_end(key)
        while len(self._seen) > self.capacity:
            self._seen.popitem(last=False)


def _keys(delivery: str | None, body: bytes) -> list[str]:
    digest = "body:" + hashlib.sha256(body).hexdigest()
    return [digest, "id:" + delivery] if delivery else [digest]
