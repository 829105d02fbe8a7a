"""How the proxy credits a stream's items back to its replica (proxy.pool.socketcalls), seen
from a replica's end of a real Unix socket: the proxy's `ReplicaConnection` in this process.

A server-sent-event stream sends one item at a time, each passed on before the next exists.
The proxy credits what it has passed on once it is half the window, so such a stream costs one
frame back per half window, not one per event, and its replica is never held by the window."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from datalink.frames import Frame, FrameDecoder, Kind, Opening, Window, encode
from proxy.pool.socketcalls import ReplicaConnection

EVENTS = 64


async def _slow_stream(window: Window) -> tuple[list[bytes], list[tuple[int, int]], int]:
    """The items the proxy passed on, the credits it sent, and the most items ever unacknowledged."""
    credits: list[tuple[int, int]] = []
    most_unacked = 0
    opened: asyncio.Future[Frame] = asyncio.get_running_loop().create_future()

    async def replica(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal most_unacked

        def seen(frame: Frame) -> None:
            if frame.kind is Kind.STREAM:
                opened.set_result(frame)
            elif frame.kind is Kind.CREDIT:
                credits.append(frame.payload)

        decoder = FrameDecoder(seen)

        async def read() -> None:
            while data := await reader.read(65536):
                decoder.feed(data)

        reading = asyncio.create_task(read())
        stream = await opened
        for n in range(EVENTS):
            writer.write(encode(Kind.ITEM, stream.call_id, b"data: token %d\n\n" % n))
            await writer.drain()
            most_unacked = max(most_unacked, n + 1 - sum(items for items, _ in credits))
            await asyncio.sleep(0.002)  # the next event is later: the proxy has passed this one on
        writer.write(encode(Kind.END, stream.call_id))
        await writer.drain()
        await asyncio.sleep(0.05)  # what the proxy still sends
        reading.cancel()
        writer.close()

    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "replica.sock")
        server = await asyncio.start_unix_server(replica, path)
        _, connection = await asyncio.get_running_loop().create_unix_connection(
            lambda: ReplicaConnection("slow", window=window), path)
        framed = connection.frame(Kind.STREAM, Opening("stream-1", window))
        assert framed is not None
        call_id, frame = framed
        items = [item async for item in connection.items(call_id, frame, window)]
        await asyncio.sleep(0.1)
        server.close()
    return items, credits, most_unacked


def test_a_slow_stream_is_credited_once_every_half_window_not_once_an_item() -> None:
    window = Window(items=32, bytes=1 << 20)

    items, credits, most_unacked = asyncio.run(_slow_stream(window))

    assert items == [b"data: token %d\n\n" % n for n in range(EVENTS)]
    assert [count for count, _ in credits] == [16] * (EVENTS // 16)
    assert sum(size for _, size in credits) == sum(map(len, items))
    assert most_unacked <= window.items // 2  # the replica never came near its window


def test_a_window_of_one_item_is_credited_after_every_item() -> None:
    items, credits, most_unacked = asyncio.run(_slow_stream(Window(items=1, bytes=1 << 20)))

    assert len(items) == EVENTS
    assert [count for count, _ in credits] == [1] * EVENTS
    assert most_unacked == 1
