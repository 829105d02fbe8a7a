"""Relaying a streaming answer to its client, chunk by chunk, and how it ended.

Owns the body of a streamed response after its head went out: each chunk is
sent as it arrives; a gap between chunks longer than the endpoint's
`timeout_s`, a replica that dies, a handler that raises, or a client that
disconnects ends it. The client's answer has started by then, so an early
end cannot change its status: the response is left incomplete (the server
closes the connection, which a client sees as a broken body), and the
request is recorded with the status the failure would have had (`stream_code`).
Leaving the chunk iterator early cancels the replica's generator. Given a
list, `relay` appends the gap before each chunk after the head (seconds, on
the monotonic clock): for a token stream, the time per output token.

Not here: the call that produced the head (`proxy.app`), Ray (`proxy.raycalls`).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from typing import AsyncGenerator

from httpedge.asgi import Receive, Send
from proxy.calling import HandlerError, ReplicaDiedError

__all__ = ["StreamEnd", "relay", "stream_code"]

logger = logging.getLogger(__name__)



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


def stream_code(end: StreamEnd, status: int) -> int:
    """The status a streamed request is recorded with: its own when it completed."""
    return _CODES.get(end, status)


async def relay(
    chunks: AsyncGenerator[bytes, None], send: Send, idle_s: float, receive: Receive, status: int,
    gaps: list[float] | None = None,
) -> StreamEnd:
    """Send `chunks` until they end, and say how they ended; `gaps` gets the time before each chunk."""
    pump = asyncio.ensure_future(_pump(chunks, send, idle_s, gaps))
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
    chunks: AsyncGenerator[bytes, None], send: Send, idle_s: float, gaps: list[float] | None
) -> StreamEnd:
    last = time.perf_counter()
    try:
        while True:
            try:
                async with asyncio.timeout(idle_s):
                    chunk = await anext(chunks)
            except StopAsyncIteration:
                break
            if gaps is not None:
                now = time.perf_counter()
                gaps.append(now - last)
                last = now
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    except TimeoutError:
        return StreamEnd.IDLE_TIMEOUT
    except ReplicaDiedError:
        return StreamEnd.REPLICA_DIED
    except HandlerError as error:
        logger.error("a streaming handler raised:\n%s", error)
        return StreamEnd.HANDLER_RAISED
    finally:
        await chunks.aclose()
    await send({"type": "http.response.body", "body": b"", "more_body": False})
    return StreamEnd.COMPLETE
