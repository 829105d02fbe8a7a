"""The proxy's end of a reply that comes back in pieces (an ANSWER, then BODY
frames), against a scripted replica on a real Unix socket: what a well-behaved
replica sends is answered whole, and a replica that breaks the framing (more
bytes than announced, a piece before its ANSWER, another reply amid the
pieces) loses its connection, never a truncated or padded body.

Every scenario runs on asyncio's own loop and on uvloop, which the proxy runs on."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Awaitable, Callable

import pytest
import uvloop

from datalink.frames import BODY_PIECE_BYTES, PIECES_ABOVE, Frame, FrameDecoder, Kind, encode, encode_piece
from proxy.pool.calling import ReplicaDiedError
from proxy.pool.socketcalls import ReplicaConnection, connect
from vocabulary.request_path.wire import make_request

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
SIZE = 2 * BODY_PIECE_BYTES + 3
BODY = bytes(range(256)) * (SIZE // 256) + b"end"


class Replica:
    """A scripted replica: hands each frame it reads to the test, writes what the test says."""

    def __init__(self) -> None:
        self.frames: asyncio.Queue[Frame] = asyncio.Queue()
        self.writer: asyncio.StreamWriter | None = None
        self.connected = asyncio.Event()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.connected.set()
        decoder = FrameDecoder(self.frames.put_nowait)
        while data := await reader.read(65536):
            decoder.feed(data)

    def send(self, data: bytes) -> None:
        assert self.writer is not None
        self.writer.write(data)

    async def next_call(self) -> Frame:
        return await asyncio.wait_for(self.frames.get(), 10)


def run(scenario: Callable[[Replica, ReplicaConnection], Awaitable[None]], loop: str) -> None:
    async def main() -> None:
        with tempfile.TemporaryDirectory() as directory:
            path = str(Path(directory) / "data.sock")
            replica = Replica()
            server = await asyncio.start_unix_server(replica.serve, path)
            connection = await connect(path, "scripted")
            try:
                await asyncio.wait_for(replica.connected.wait(), 10)
                async with asyncio.timeout(60):
                    await scenario(replica, connection)
            finally:
                connection.close("the test is over")
                server.close()

    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        runner.run(main())


def answer(call_id: int, size: int = SIZE) -> bytes:
    return encode(Kind.ANSWER, call_id, (200, [(b"content-type", b"application/octet-stream")], size))


def pieces(call_id: int, body: bytes = BODY) -> bytes:
    return b"".join(encode_piece(call_id, body[at : at + BODY_PIECE_BYTES]) for at in range(0, len(body), BODY_PIECE_BYTES))


def call(connection: ReplicaConnection, body: bytes = b"") -> asyncio.Task[object]:
    coroutine = connection.request(make_request("POST", "/", body=body))
    assert coroutine is not None
    return asyncio.ensure_future(coroutine)


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_an_answer_and_its_pieces_are_one_reply_whole_and_in_order(loop: str) -> None:
    async def scenario(replica: Replica, connection: ReplicaConnection) -> None:
        first, second = call(connection), call(connection)
        one, two = await replica.next_call(), await replica.next_call()
        # Two answers' pieces interleaved on one connection: each call gets its own body.
        other = b"o" * (PIECES_ABOVE + 1)
        replica.send(answer(one.call_id) + answer(two.call_id, len(other)) + encode_piece(one.call_id, BODY[:10])
                     + encode_piece(two.call_id, other) + pieces(one.call_id, BODY[10:]))
        assert await first == (200, [(b"content-type", b"application/octet-stream")], BODY)
        assert (await second)[2] == other  # type: ignore[index]
        assert connection.open

    run(scenario, loop)


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_call_cancelled_amid_its_answers_pieces_drops_the_rest_and_the_connection_goes_on(loop: str) -> None:
    async def scenario(replica: Replica, connection: ReplicaConnection) -> None:
        cancelled = call(connection)
        first = await replica.next_call()
        replica.send(answer(first.call_id) + encode_piece(first.call_id, BODY[:100]))
        await asyncio.sleep(0.05)
        cancelled.cancel()
        assert (await replica.next_call()) == Frame(Kind.CANCEL, first.call_id, None)
        replica.send(pieces(first.call_id, BODY[100:]))  # already on its way: dropped
        following = call(connection, b"next")
        second = await replica.next_call()
        replica.send(encode(Kind.RESULT, second.call_id, (200, [], b"fine")))
        assert await following == (200, [], b"fine")
        assert connection.open and not connection._answers

    run(scenario, loop)


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_last_piece_that_arrives_as_its_call_is_cancelled_is_dropped_and_cancelled_once(loop: str) -> None:
    async def scenario(replica: Replica, connection: ReplicaConnection) -> None:
        cancelled = call(connection)
        first = await replica.next_call()
        replica.send(answer(first.call_id) + encode_piece(first.call_id, BODY[:100]))
        while first.call_id not in connection._answers:
            await asyncio.sleep(0.01)
        # The client left (its future is cancelled now) and, in the same loop iteration, before
        # the call's task runs to say so, the replica's last piece arrives.
        cancelled.cancel()
        connection.on_frame(Frame(Kind.BODY, first.call_id, BODY[100:]))
        assert connection.open and not connection._answers
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        assert (await replica.next_call()) == Frame(Kind.CANCEL, first.call_id, None)
        following = call(connection, b"next")
        second = await replica.next_call()  # the CANCEL went once: the next frame is the next call
        assert second.kind is Kind.REQUEST
        replica.send(encode(Kind.RESULT, second.call_id, (200, [], b"fine")))
        assert await following == (200, [], b"fine")

    run(scenario, loop)


MALFORMED = {
    "more bytes than announced": lambda call_id: answer(call_id) + pieces(call_id, BODY + b"!"),
    "a piece before its answer": lambda call_id: encode_piece(call_id, BODY[:10]),
    "a result amid the pieces": lambda call_id: answer(call_id) + encode_piece(call_id, BODY[:10])
    + encode(Kind.RESULT, call_id, (200, [], b"")),
    "an answer small enough for one frame": lambda call_id: answer(call_id, PIECES_ABOVE),
}


@pytest.mark.parametrize("loop", sorted(LOOPS))
@pytest.mark.parametrize("how", sorted(MALFORMED))
def test_an_answer_that_breaks_the_framing_fails_the_call_and_closes_the_connection(how: str, loop: str) -> None:
    async def scenario(replica: Replica, connection: ReplicaConnection) -> None:
        pending = call(connection)
        frame = await replica.next_call()
        replica.send(MALFORMED[how](frame.call_id))
        with pytest.raises(ReplicaDiedError):
            await pending
        assert not connection.open

    run(scenario, loop)
