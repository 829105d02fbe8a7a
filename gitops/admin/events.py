"""`GET /events`: the status page's live updates as server-sent events, bounded.

`EventStreams` counts the open streams: at most `max_streams` (16) in all
and `per_principal` (4) of one caller; one more is refused (the admin API
answers 503 with Retry-After, and the page falls back to asking every few
seconds). `frames` is one stream: a `retry:` hint, then an `update` event
whenever what `snapshot()` answers changes (looked at every `poll_s`), a
comment line as a heartbeat after `heartbeat_s` of silence (so proxies and
the browser see it alive), and an `end` event when the stream has lived
`lifetime_s` (5 minutes): the browser's EventSource then connects again, so
no client holds a connection longer than that, whatever it does. A client
that leaves ends its stream at once (the server says so); `close` (the
listener stopping) ends every stream at its next look and refuses new ones,
so a stop does not wait for them. The snapshot is
what `/status` and the pending plan already answer (redacted there), and
names no caller but by name: no token ever goes into a stream.
Must not: touch the agent (the snapshot is given).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable

__all__ = ["EventLimits", "EventStreams", "frames", "frame"]


@dataclass(frozen=True)
class EventLimits:
    max_streams: int = 16
    per_principal: int = 4
    lifetime_s: float = 300.0
    heartbeat_s: float = 15.0
    poll_s: float = 1.0
    retry_ms: int = 3000  # the browser's wait before it connects again


class EventStreams:
    """The open streams, by caller."""

    def __init__(self, limits: EventLimits) -> None:
        self.limits = limits
        self._open: Counter[str] = Counter()
        self.closing = False

    @property
    def open(self) -> int:
        return sum(self._open.values())

    def acquire(self, who: str) -> str | None:
        """Take a stream for `who`; None when taken, else why not."""
        if self.closing:
            return "the agent is stopping"
        if self.open >= self.limits.max_streams:
            return f"{self.limits.max_streams} event streams are open already"
        if self._open[who] >= self.limits.per_principal:
            return f"{who} has {self.limits.per_principal} event streams open already"
        self._open[who] += 1
        return None

    def close(self) -> None:
        """End every stream at its next look (the listener stops)."""
        self.closing = True

    def release(self, who: str) -> None:
        self._open[who] -= 1
        if self._open[who] <= 0:
            del self._open[who]


def frame(event: str, data: Any) -> bytes:
    """One event: JSON data on one `data:` line (JSON escapes every line break)."""
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


async def frames(snapshot: Callable[[], Any], limits: EventLimits, clock: Callable[[], float] = time.monotonic,
                 closing: Callable[[], bool] = lambda: False) -> AsyncIterator[bytes]:
    yield f"retry: {limits.retry_ms}\n\n".encode()
    started = quiet_since = clock()
    last: Any = None
    while clock() - started < limits.lifetime_s and not closing():
        now = clock()
        data = snapshot()
        if data != last:
            last, quiet_since = data, now
            yield frame("update", data)
        elif now - quiet_since >= limits.heartbeat_s:
            quiet_since = now
            yield b": heartbeat\n\n"
        await asyncio.sleep(limits.poll_s)
    yield frame("end", {"reason": f"a stream lives {limits.lifetime_s:g} s; connect again"})
