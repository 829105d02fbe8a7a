"""Relaying a streaming answer to its client, chunk by chunk, and how it ended.

Owns a streamed response from its head on (`answer_stream`, below);
`relay`, its body after the head went out: each chunk is sent as it
arrives; a gap between chunks longer than the endpoint's `timeout_s`, a
replica that dies, a handler that raises, or a client that
disconnects ends it. The client's answer has started by then, so an early
end cannot change its status: the response is left incomplete (the server
closes the connection, which a client sees as a broken body), and the
request is recorded with the status the failure would have had (`stream_code`).
Leaving the chunk iterator early cancels the replica's generator. Given
`ChunkGaps`, `relay` hands on the gap before each chunk after the head as it
comes (seconds, on the monotonic clock: for a token stream, the time per
output token) and counts the chunks, so a stream holds the same few bytes
however long it runs. The idle bound is one timer per stream, moved on only
when it fires, not one armed and cancelled per chunk.

`observed` hands each chunk, as it passes, to the request's observers
(`proxy.pipeline.transit.Transit.observe`: the capture record, the token budget's usage).

`answer_stream` is the whole of a streamed answer on the HTTP path, once
its call returned `Held` (a head and the replica slot it keeps): the
stages' `streaming` hooks, the head sent and its time to first byte
reported, the rest relayed as above (its observers shown each chunk), the
slot given back (and dropped when its replica died), an unclaimed stream
let go when its client left before it was read, its chunks counted, and the
stages' `answered` hooks given the code it is recorded with. The
endpoint's `timeout_s` bounds the time to the first chunk (the call's
deadline) and each gap after it. It is never copied to shadows or compared.

Not here: the call that produced the head (`proxy.pipeline.forward`), Ray (`proxy.shell.raycalls`).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from typing import TYPE_CHECKING, AsyncGenerator, Callable, Protocol, Sequence

from httpedge.asgi import Receive, Send
from proxy.observability.bodies import EMPTY
from proxy.pipeline.transit import Transit, end_to_end
from proxy.pool.calling import HandlerError, ReplicaDiedError, StreamCaller
from proxy.pool.sending import Held

if TYPE_CHECKING:
    from proxy.pipeline.stage import Chain

__all__ = ["ChunkGaps", "StreamEnd", "StreamReports", "answer_stream", "observed", "relay", "stream_code"]

logger = logging.getLogger(__name__)


class StreamReports(Protocol):
    """What a streamed answer reports (`proxy.pipeline.stages.count.Recorder` has all three)."""

    def first_byte(self, endpoint: str, backend: str, seconds: float) -> None: ...

    def gap_observer(self, endpoint: str, backend: str) -> Callable[[float], None]: ...

    def stream_done(self, endpoint: str, backend: str, chunks: int) -> None: ...


class ChunkGaps:
    """A stream's gaps between chunks, each handed to `observe` as it comes, and how many there were.

    Each gap used to wait in a list until the stream ended: 36 bytes per chunk, so a proxy holding
    1,000 streams of 20 events a second grew by 0.7 KiB per stream each second (`bench.streams`:
    18 KiB per stream after 8 s, 31.5 after 25 s)."""

    __slots__ = ("observe", "count")

    def __init__(self, observe: Callable[[float], None]) -> None:
        self.observe = observe
        self.count = 0


class StreamEnd(str, enum.Enum):
    COMPLETE = "complete"
    IDLE_TIMEOUT = "no chunk within the endpoint's timeout_s"
    REPLICA_DIED = "the replica died"
    HANDLER_RAISED = "the handler raised"
    CLIENT_LEFT = "the client disconnected"


_CODES = {
    StreamEnd.IDLE_TIMEOUT: 504,
    StreamEnd.REPLICA_DIED: 502,
    StreamEnd.HANDLER_RAISED: 500,
    StreamEnd.CLIENT_LEFT: 499,
}


async def observed(
    chunks: AsyncGenerator[bytes, None], observers: Sequence[Callable[[bytes], None]]
) -> AsyncGenerator[bytes, None]:
    """`chunks` as they come, each given to every observer first (none kept here)."""
    try:
        async for chunk in chunks:
            for observer in observers:
                observer(chunk)
            yield chunk
    finally:
        await chunks.aclose()


def stream_code(end: StreamEnd, status: int) -> int:
    """The status a streamed request is recorded with: its own when it completed."""
    return _CODES.get(end, status)


async def answer_stream(
    transit: Transit, held: Held, stages: Chain, caller: StreamCaller, reports: StreamReports,
    receive: Receive, send: Send,
) -> None:
    """Send `transit`'s streamed answer, `held`, to its client (`receive`, `send`) as it comes, to its end."""
    served, backend, start = transit.served, transit.backend, held.start
    transit.held = held
    for hook in stages.streaming:
        hook(transit)
    status = StreamEnd.CLIENT_LEFT  # unless the relay says how it ended
    gaps = ChunkGaps(reports.gap_observer(served.name, backend))
    try:
        await send({"type": "http.response.start", "status": start.status, "headers": end_to_end(start.headers)})
        await send({"type": "http.response.body", "body": start.first_chunk, "more_body": True})
        reports.first_byte(served.name, backend, time.perf_counter() - transit.started)
        chunks = caller.stream(held.slot.handle, start)
        if transit.observers is not None:  # the capture record, the token budget's usage
            chunks = observed(chunks, transit.observers)
        status = await relay(chunks, send, served.timeout_s, receive, start.status, gaps)
    finally:
        if status is StreamEnd.CLIENT_LEFT:
            # A client gone before the stream's rest was first read leaves it unclaimed, and the
            # replica would keep producing it until it gives unclaimed streams up; a claimed
            # stream was closed by the relay already, and letting it go again changes nothing.
            caller.discard(held.slot.handle, start)
        held.pool.release(held.slot)
    reports.stream_done(served.name, backend, 1 + gaps.count)  # the head's chunk and the rest
    if status == StreamEnd.REPLICA_DIED:
        held.pool.drop(held.slot)
    code = stream_code(status, start.status)
    if code != start.status:
        logger.warning("stream of %s from backend %s ended early: %s", served.name, backend, status.value)
    transit.duration_s = time.perf_counter() - transit.started
    for answered in stages.answered:
        answered(transit, code, end_to_end(start.headers), EMPTY)


async def relay(
    chunks: AsyncGenerator[bytes, None], send: Send, idle_s: float, receive: Receive, status: int,
    gaps: ChunkGaps | None = None,
) -> StreamEnd:
    """Send `chunks` until they end, and say how they ended; `gaps` gets the time before each chunk."""
    # Named: asyncio formats a name for a task left without one (1,450 instructions).
    pump = asyncio.get_running_loop().create_task(_pump(chunks, send, idle_s, gaps), name="pump")
    watch = asyncio.ensure_future(receive())
    try:
        await asyncio.wait((pump, watch), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not pump.done():
            pump.cancel()
        await asyncio.gather(pump, return_exceptions=True)
    if pump.cancelled():
        return StreamEnd.CLIENT_LEFT
    return pump.result()


async def _pump(
    chunks: AsyncGenerator[bytes, None], send: Send, idle_s: float, gaps: ChunkGaps | None
) -> StreamEnd:
    idle = _IdleWatch(idle_s)
    last = time.perf_counter()
    try:
        while True:
            idle.waiting = True
            idle.since = idle.loop.time()
            try:
                chunk = await anext(chunks)
            except StopAsyncIteration:
                break
            except asyncio.CancelledError:
                if idle.expired and idle.task.uncancel() == 0:
                    return StreamEnd.IDLE_TIMEOUT
                raise
            idle.waiting = False
            if gaps is not None:
                now = time.perf_counter()
                gaps.count += 1
                gaps.observe(now - last)
                last = now
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    except ReplicaDiedError:
        return StreamEnd.REPLICA_DIED
    except HandlerError as error:
        logger.error("a streaming handler raised:\n%s", error)
        return StreamEnd.HANDLER_RAISED
    finally:
        idle.stop()
        await chunks.aclose()
    await send({"type": "http.response.body", "body": b"", "more_body": False})
    return StreamEnd.COMPLETE


class _IdleWatch:
    """Cancels the pump when one wait for a chunk lasts `idle_s`. One timer per stream,
    moved on only when it fires (to `idle_s` after the wait then running began): an
    `asyncio.timeout` around each wait armed and cancelled a timer per chunk, most of
    the relay's own cost per chunk (`python -m bench.stream_relay`, interleaved runs on a
    2-core machine at load 14-20: 9.4-9.9 us per chunk with it, 2.6-4.1 us without)."""

    __slots__ = ("idle_s", "loop", "task", "waiting", "since", "expired", "_timer")

    def __init__(self, idle_s: float) -> None:
        self.idle_s = idle_s
        self.loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.waiting = False
        self.since = self.loop.time()
        self.expired = False
        self._timer = self.loop.call_at(self.since + idle_s, self._check)

    def _check(self) -> None:
        due = (self.since if self.waiting else self.loop.time()) + self.idle_s
        if self.waiting and self.loop.time() >= due:
            self.expired = True
            self.task.cancel()
        else:
            self._timer = self.loop.call_at(due, self._check)

    def stop(self) -> None:
        self._timer.cancel()
