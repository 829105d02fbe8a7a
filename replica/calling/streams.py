"""The streams a replica holds between the call that started them and the call that reads them.

A streaming answer's head goes back with the first Ray call; the proxy then
claims the rest by id with a streaming generator call (or a STREAM frame
over the same-node data socket, `replica.data_socket`). A stream nobody
claims within `unclaimed_s` (its proxy died, or its client left in between,
or it was a shadow copy's) is closed, which stops the user code producing it.

Not here: producing streams (`replica.calling.asgi`), the Ray methods (`replica.host`).
"""

from __future__ import annotations

import asyncio
import itertools
from typing import AsyncGenerator

__all__ = ["StreamTable", "UNCLAIMED_S"]

UNCLAIMED_S = 30.0


class StreamTable:
    def __init__(self, prefix: str, unclaimed_s: float = UNCLAIMED_S) -> None:
        self._prefix = prefix
        self._unclaimed_s = unclaimed_s
        self._ids = itertools.count()
        self._held: dict[str, AsyncGenerator[bytes, None]] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def hold(self, rest: AsyncGenerator[bytes, None]) -> str:
        stream_id = f"{self._prefix}:{next(self._ids)}"
        self._held[stream_id] = rest
        asyncio.get_running_loop().call_later(self._unclaimed_s, self.close, stream_id)
        return stream_id

    def claim(self, stream_id: str) -> AsyncGenerator[bytes, None] | None:
        """The stream, once; None when it was closed or never existed."""
        return self._held.pop(stream_id, None)

    def close(self, stream_id: str) -> None:
        rest = self._held.pop(stream_id, None)
        if rest is not None:
            task = asyncio.ensure_future(_closed(rest))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def __len__(self) -> int:
        return len(self._held)


async def _closed(rest: AsyncGenerator[bytes, None]) -> None:
    """Close `rest`, running its cleanup (which stops its producer) even when
    nobody ever iterated it: closing a generator that never started skips its
    `finally`, so it is stepped into first (its chunk, if any, is dropped)
    and cancelled there."""
    step = asyncio.ensure_future(anext(rest))
    await asyncio.sleep(0)  # the step runs up to its first wait (or its first chunk)
    step.cancel()
    await asyncio.gather(step, return_exceptions=True)
    await rest.aclose()
