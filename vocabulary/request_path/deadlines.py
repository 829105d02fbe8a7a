"""A request's deadline as it travels: the client's header, the wire's, and the clock it is read against.

A client may bound its request with `X-Request-Timeout: SECONDS` (a number
>= 0; `TIMEOUT_HEADER`). The proxy reads it (`client_timeout`: a malformed
value is `BadTimeout`, whose text is the 400's), caps it by the endpoint's
`timeout_s` (`capped`), and carries what is left of it with each replica
call as the wire request's last header, `DEADLINE_HEADER` (seconds left,
`with_deadline`): a name with a colon cannot come from an HTTP/1.1 client,
so a client cannot forge it. Seconds left, not an instant: monotonic clocks
differ between processes, so the receiver anchors them on its own clock
(`Deadline.after`); the time the call spent in transit is the receiver's
gain, never more than that. A replica takes the header off (`split_deadline`)
before anything else reads the request, and passes what is left on to the
handle calls its code makes (a `Deadline` in a context variable,
`ray_gitops.registry`).

Pure: values, and the clock a caller passes in.
"""

from __future__ import annotations

import math

from vocabulary.request_path.wire import WireRequest

__all__ = [
    "TIMEOUT_HEADER", "DEADLINE_HEADER", "BadTimeout", "parse_timeout", "client_timeout", "capped",
    "with_deadline", "split_deadline", "Deadline",
]

TIMEOUT_HEADER = b"x-request-timeout"
DEADLINE_HEADER = b":deadline"  # the seconds left, as the proxy or a calling replica sent the request


class BadTimeout(ValueError):
    """A client's `X-Request-Timeout` is not a number of seconds >= 0; the text says so (the 400's body)."""


def parse_timeout(value: bytes) -> float:
    """`X-Request-Timeout`'s value in seconds: a decimal number >= 0 ("0.2", "5"); else `BadTimeout`."""
    text = value.decode("latin-1").strip()
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    # float() also reads "inf", "nan" and "1_0": none of them is a client's number of seconds.
    if not math.isfinite(seconds) or seconds < 0 or "_" in text:
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise BadTimeout(f"Bad Request: X-Request-Timeout must be a number of seconds >= 0, such as 0.5 (got {shown!r})")
    return seconds


def client_timeout(headers: list[tuple[bytes, bytes]]) -> float | None:
    """The seconds the client's `X-Request-Timeout` allows (its first one), or None when it sent none."""
    for name, value in headers:
        if name == TIMEOUT_HEADER:
            return parse_timeout(value)
    return None


def capped(client_s: float | None, timeout_s: float) -> float:
    """The request's time: the client's, never more than its endpoint's `timeout_s`."""
    return timeout_s if client_s is None or client_s > timeout_s else client_s


def with_deadline(request: WireRequest, left_s: float) -> WireRequest:
    """`request` carrying `left_s` seconds left, as its last header (a new tuple: the request is not changed)."""
    method, path, query, headers, body = request
    return method, path, query, [*headers, (DEADLINE_HEADER, b"%.6f" % max(left_s, 0.0))], body


def split_deadline(request: WireRequest) -> tuple[WireRequest, float | None]:
    """`request` without the deadline `with_deadline` put on it, and its seconds left (None: it carried none).
    A value that is no number counts as no time left: a malformed deadline is never read as none."""
    headers = request[3]
    if not headers or headers[-1][0] != DEADLINE_HEADER:
        return request, None
    try:
        left = float(headers[-1][1])
    except ValueError:
        left = 0.0
    if not math.isfinite(left):
        left = 0.0
    method, path, query, _, body = request
    return (method, path, query, headers[:-1], body), left


class Deadline:
    """An instant on one process's monotonic clock by which a request must be answered."""

    __slots__ = ("at",)

    def __init__(self, at: float) -> None:
        self.at = at

    @classmethod
    def after(cls, left_s: float, now: float) -> Deadline:
        """The deadline `left_s` seconds after `now` (a received deadline, anchored on this clock)."""
        return cls(now + max(left_s, 0.0))

    def left(self, now: float) -> float:
        """Seconds left at `now`, never below 0."""
        return max(self.at - now, 0.0)

    def passed(self, now: float) -> bool:
        return now >= self.at

    def __repr__(self) -> str:
        return f"Deadline(at={self.at!r})"
