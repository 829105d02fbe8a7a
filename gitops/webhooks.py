"""Push-webhook checks: GitHub-style HMAC-SHA256 signatures and a rate limit.

Pure: no HTTP, no clock of its own (the limiter is given the time). The
admin app turns a `Verdict` into a status code; a verified webhook only
ever triggers a fetch, so nothing in the payload is trusted or read.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
from dataclasses import dataclass, field
from pathlib import Path

from gitops.errors import UserError

__all__ = ["Verdict", "verify", "sign", "RateLimiter", "read_secret", "SIGNATURE_HEADER", "MAX_BODY_BYTES"]

SIGNATURE_HEADER = "X-Hub-Signature-256"
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
    try:
        secret = Path(path).read_bytes().strip()
    except OSError as error:
        raise UserError(f"--webhook-secret-file {path}: {error.strerror}") from None
    if not secret:
        raise UserError(f"--webhook-secret-file {path}: the file is empty")
    return secret


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
