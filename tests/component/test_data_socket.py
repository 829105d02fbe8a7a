"""The same-node data path: a real replica serving frames on a real Unix socket,
called through the proxy's call stack (`ReplicaCalls`, `DataConnections`) in the same process (no Ray).

Every scenario runs on asyncio's own loop and on uvloop, which Ray's actors
(the proxy's and the replica's) run on."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import struct
import tempfile
import tracemalloc
from typing import Awaitable, Callable

import pytest
import uvloop

from datalink.frames import BODY_PIECE_BYTES, PIECES_ABOVE, Frame, FrameDecoder, Kind, Opening, Window, encode, encode_piece
from proxy.pool.calling import HandlerError, ReplicaDiedError
from proxy.pool.replica_calls import ReplicaCalls
from proxy.pool.socketcalls import DataConnections
from replica.host import Replica
from tests.support.data_path import APPS, App, Calls, FakeHandle, RecordingFallback
from vocabulary.control.actor_apis import ReplicaHandle
from vocabulary.request_path.wire import DataAddress, StreamStart, WireRequest, make_request
from vocabulary.spec.backends import BackendConfig


class Scene:
    def __init__(self, replica: Replica, path: str, calls: Calls, fallback: RecordingFallback) -> None:
        self.replica, self.path, self.calls, self.fallback = replica, path, calls, fallback
        self.handle = FakeHandle("r1")


LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
_loop_factory: list[Callable[[], asyncio.AbstractEventLoop]] = [asyncio.new_event_loop]


@pytest.fixture(autouse=True, params=sorted(LOOPS))
def event_loop_kind(request: pytest.FixtureRequest) -> str:
    _loop_factory[0] = LOOPS[request.param]
    return str(request.param)


def run(
    scenario: Callable[[Scene], Awaitable[None]],
    handler: str = "App",
    node: str = "node-a",
    replica_max_frame: int | None = None,
    proxy_max_frame: int | None = None,
) -> None:
    async def main() -> None:
        App.started, App.cancelled = asyncio.Event(), asyncio.Event()
        replica = Replica(BackendConfig(name="echo", version="v1", import_path=f"{APPS}:{handler}"), "r1")
        await replica.initialize()
        extra = {} if replica_max_frame is None else {"max_frame": replica_max_frame}
        path = await replica.serve_frames([tempfile.gettempdir()], **extra)
        assert path is not None

        async def ask(handle: ReplicaHandle) -> DataAddress | None:
            return DataAddress(node, path)

        fallback = RecordingFallback()
        options = {} if proxy_max_frame is None else {"max_frame": proxy_max_frame}
        calls = Calls(fallback, DataConnections(lambda: "node-a", ask, **options))
        try:
            async with asyncio.timeout(60):  # a hang fails the test instead of the run
                await scenario(Scene(replica, path, calls, fallback))
        finally:
            calls.connections.close()
            await replica.prepare_for_shutdown(0)

    with asyncio.Runner(loop_factory=_loop_factory[0]) as runner:
        runner.run(main())


def get(path: str, body: bytes = b"") -> WireRequest:
    return make_request("POST", path, body=body)


def test_requests_go_over_the_socket_once_it_is_connected() -> None:
    async def scenario(scene: Scene) -> None:
        assert await scene.calls.connections.settled(scene.handle) is True
        assert await scene.calls.one(scene.handle, get("/", b"one")) == (200, [(b"content-length", b"8")], b"echo:one")
        replies = await asyncio.gather(scene.calls.one(scene.handle, get("/", b"a")), scene.calls.one(scene.handle, get("/boom")),
                                       return_exceptions=True)
        assert replies[0] == (200, [(b"content-length", b"6")], b"echo:a")
        assert isinstance(replies[1], HandlerError) and "the model exploded" in str(replies[1])
        assert scene.fallback.calls == []
        assert scene.replica.frames_served() == 2

    run(scenario)


def test_the_first_call_goes_over_ray_while_the_address_is_asked() -> None:
    async def scenario(scene: Scene) -> None:
        assert await scene.calls.one(scene.handle, get("/")) == (203, [], b"over ray")
        assert await scene.calls.connections.settled(scene.handle) is True
        assert (await scene.calls.one(scene.handle, get("/")))[2] == b"echo:"

    run(scenario)


def test_a_batched_handler_gets_its_list_over_the_socket() -> None:
    async def scenario(scene: Scene) -> None:
        await scene.calls.connections.settled(scene.handle)
        results = await scene.calls.batch(scene.handle, [(get("/", b"x"), 5.0), (get("/", b"y"), 5.0)])
        assert [response[2] for _, response in results] == [b"2:x", b"2:y"]
        assert scene.fallback.calls == []

    run(scenario, handler="Batched")


def test_a_connected_replica_gets_each_request_at_once_never_behind_a_slow_one() -> None:
    """Over Ray the second request would wait in the outbox for the first's window (an hour here)."""
    async def scenario(scene: Scene) -> None:
        await scene.calls.connections.settled(scene.handle)
        calls = ReplicaCalls(scene.fallback, max_calls_per_replica=1, coalesce_window_s=3600.0,
                             connections=scene.calls.connections)
        slow = asyncio.ensure_future(calls.call(scene.handle, get("/slow"), 3600.0))
        assert App.started is not None
        await App.started.wait()
        replies = await asyncio.gather(*(calls.call(scene.handle, get("/", str(n).encode()), 5.0) for n in range(20)))
        assert [reply[2] for reply in replies] == [f"echo:{n}".encode() for n in range(20)]
        assert not slow.done() and scene.replica.frames_served() == 20
        assert scene.fallback.calls == []
        slow.cancel()

    run(scenario)


def test_a_handler_that_raises_is_a_handler_error_with_its_traceback() -> None:
    async def scenario(scene: Scene) -> None:
        await scene.calls.connections.settled(scene.handle)
        with pytest.raises(HandlerError, match="the model exploded"):
            await scene.calls.one(scene.handle, get("/boom"))
        # The connection is fine afterwards.
        assert (await scene.calls.one(scene.handle, get("/", b"ok")))[2] == b"echo:ok"

    run(scenario)


def test_a_cancelled_call_cancels_the_handler_on_the_replica() -> None:
    async def scenario(scene: Scene) -> None:
        await scene.calls.connections.settled(scene.handle)
        call = asyncio.ensure_future(scene.calls.one(scene.handle, get("/slow")))
        assert App.started is not None and App.cancelled is not None
        await asyncio.wait_for(App.started.wait(), 10)
        call.cancel()
        await asyncio.wait_for(App.cancelled.wait(), 10)
        assert scene.replica.num_ongoing() == 0
        assert (await scene.calls.one(scene.handle, get("/", b"after")))[2] == b"echo:after"

    run(scenario)


def test_a_connection_closed_mid_call_fails_every_pending_call_and_the_replica_falls_back_to_ray() -> None:
    async def scenario(scene: Scene) -> None:
        await scene.calls.connections.settled(scene.handle)
        calls = [asyncio.ensure_future(scene.calls.one(scene.handle, get("/slow"))) for _ in range(3)]
        assert App.started is not None
        await asyncio.wait_for(App.started.wait(), 10)
        assert scene.replica._data is not None
        scene.replica._data.close()  # as a replica process that dies closes it
        outcomes = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 10)
        assert all(isinstance(outcome, ReplicaDiedError) for outcome in outcomes), outcomes
        assert await scene.calls.one(scene.handle, get("/")) == (203, [], b"over ray")

    run(scenario)


def test_a_replica_on_another_node_is_called_over_ray() -> None:
    async def scenario(scene: Scene) -> None:
        assert await scene.calls.connections.settled(scene.handle) is False
        assert await scene.calls.one(scene.handle, get("/")) == (203, [], b"over ray")
        assert scene.replica.frames_served() == 0

    run(scenario, node="node-b")


def test_a_request_too_large_for_one_frame_goes_over_ray() -> None:
    async def scenario(scene: Scene) -> None:
        await scene.calls.connections.settled(scene.handle)
        assert (await scene.calls.one(scene.handle, get("/", b"small")))[2] == b"echo:small"
        assert await scene.calls.one(scene.handle, get("/", b"x" * 5000)) == (203, [], b"over ray")

    run(scenario, proxy_max_frame=4000)


def test_a_reply_too_large_for_one_frame_is_held_and_streamed() -> None:
    async def scenario(scene: Scene) -> None:
        await scene.calls.connections.settled(scene.handle)
        reply = await scene.calls.one(scene.handle, make_request("GET", "/big", b"n=3000000"))
        assert isinstance(reply, StreamStart)
        assert reply.status == 200 and (b"content-length", b"3000000") in reply.headers
        chunks = [chunk async for chunk in scene.replica.stream(reply.stream_id)]
        assert reply.first_chunk + b"".join(chunks) == b"z" * 3_000_000
        small = await scene.calls.one(scene.handle, make_request("GET", "/big", b"n=10"))
        assert small == (200, [(b"content-length", b"10")], b"z" * 10)

    run(scenario, replica_max_frame=1_000_000)


SIXTEEN_MIB = 16 * 1024 * 1024


def _checksum(body: bytes) -> bytes:
    return f"{len(body)} {sum(body[::65536])}".encode()


def test_a_large_body_is_uploaded_in_pieces_and_neither_end_holds_it_twice() -> None:
    async def scenario(scene: Scene) -> None:
        await scene.calls.connections.settled(scene.handle)
        body = bytes(range(251)) * (SIXTEEN_MIB // 251 + 1)
        echoed = await scene.calls.one(scene.handle, get("/", body[: 3 * BODY_PIECE_BYTES + 7]))
        assert echoed[2] == b"echo:" + body[: 3 * BODY_PIECE_BYTES + 7]
        tracemalloc.start()
        try:
            reply = await scene.calls.one(scene.handle, get("/size", body))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert reply[2] == _checksum(body)
        assert scene.fallback.calls == []
        # Both ends are in this process: the replica's copy of the body, and a few pieces in flight.
        # Pickled in one frame, the body was held again by the proxy's pickle and frame, the
        # transport's buffer, the replica's decoder and its unpickled copy.
        assert peak < len(body) + 6 * BODY_PIECE_BYTES, peak

    run(scenario)


def test_a_large_reply_comes_back_in_pieces_and_neither_end_holds_it_twice() -> None:
    async def scenario(scene: Scene) -> None:
        await scene.calls.connections.settled(scene.handle)
        tracemalloc.start()
        try:
            reply = await scene.calls.one(scene.handle, make_request("GET", "/big", b"n=%d" % SIXTEEN_MIB))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert isinstance(reply, tuple)  # answered whole, not held as a stream
        assert reply[0] == 200 and (b"content-length", str(SIXTEEN_MIB).encode()) in reply[1]
        assert len(reply[2]) == SIXTEEN_MIB and reply[2].count(b"z") == SIXTEEN_MIB
        assert scene.fallback.calls == []
        # The replica's body and the proxy's, and a few pieces in flight. Pickled in one frame,
        # it was held again by the replica's pickle and frame, the proxy's decoder and its unpickled copy.
        assert peak < 2 * SIXTEEN_MIB + 6 * BODY_PIECE_BYTES, peak
        # At the threshold and below, a reply is one RESULT frame; just above it, one piece.
        for size in (PIECES_ABOVE, PIECES_ABOVE + 1, 3 * BODY_PIECE_BYTES + 1):
            sized = await scene.calls.one(scene.handle, make_request("GET", "/big", b"n=%d" % size))
            assert isinstance(sized, tuple) and sized[2] == b"z" * size

    run(scenario)


def _piece(frame: Frame) -> bytes:
    """A BODY frame's bytes, whether it came in one read or as its parts."""
    return frame.payload if isinstance(frame.payload, bytes) else b"".join(frame.payload)


def test_a_reply_above_the_threshold_is_an_answer_then_its_raw_pieces() -> None:
    async def scenario(scene: Scene) -> None:
        reader, writer = await _raw(scene.path)
        size = 2 * BODY_PIECE_BYTES + 5
        writer.write(encode(Kind.REQUEST, 1, make_request("GET", "/big", b"n=%d" % size))
                     + encode(Kind.REQUEST, 2, make_request("GET", "/big", b"n=%d" % PIECES_ABOVE)))
        frames: list[Frame] = []
        decoder = FrameDecoder(frames.append)
        while sum(len(_piece(frame)) for frame in frames if frame.kind is Kind.BODY) < size or len(frames) < 5:
            decoder.feed(await asyncio.wait_for(reader.read(1 << 20), 10))
        ones = [frame for frame in frames if frame.call_id == 1]
        assert [frame.kind for frame in ones] == [Kind.ANSWER, Kind.BODY, Kind.BODY, Kind.BODY]
        status, headers, announced = ones[0].payload
        assert (status, announced) == (200, size) and (b"content-length", str(size).encode()) in headers
        assert [len(_piece(frame)) for frame in ones[1:]] == [BODY_PIECE_BYTES, BODY_PIECE_BYTES, 5]
        assert b"".join(_piece(frame) for frame in ones[1:]) == b"z" * size
        [two] = [frame for frame in frames if frame.call_id == 2]
        assert two.kind is Kind.RESULT and two.payload[2] == b"z" * PIECES_ABOVE
        writer.close()

    run(scenario)


def test_a_reply_cancelled_amid_its_pieces_stops_and_the_connection_goes_on() -> None:
    async def scenario(scene: Scene) -> None:
        reader, writer = await _raw(scene.path)
        writer.write(encode(Kind.REQUEST, 1, make_request("GET", "/big", b"n=%d" % (40 * BODY_PIECE_BYTES))))
        frames: list[Frame] = []
        decoder = FrameDecoder(frames.append)
        while not frames:
            decoder.feed(await asyncio.wait_for(reader.read(65536), 10))
        assert frames[0].kind is Kind.ANSWER
        writer.write(encode(Kind.CANCEL, 1) + encode(Kind.REQUEST, 2, get("/", b"two")))
        received = 0
        while not any(frame.call_id == 2 for frame in frames):
            data = await asyncio.wait_for(reader.read(1 << 20), 10)
            received += len(data)
            decoder.feed(data)
        [two] = [frame for frame in frames if frame.call_id == 2]
        assert two.payload[2] == b"echo:two"
        assert received < 20 * BODY_PIECE_BYTES  # the rest of the 40 MiB was never sent
        data = scene.replica._data
        assert data is not None and data.calls_in_flight() == 0
        writer.close()

    run(scenario)


def test_an_upload_cancelled_midway_is_dropped_and_the_connection_goes_on() -> None:
    async def scenario(scene: Scene) -> None:
        reader, writer = await _raw(scene.path)
        size = 2 * BODY_PIECE_BYTES + 1
        writer.write(encode(Kind.UPLOAD, 1, ("POST", "/size", b"", [], size)) + encode_piece(1, b"x" * BODY_PIECE_BYTES)
                     + encode(Kind.CANCEL, 1) + encode(Kind.REQUEST, 2, get("/", b"two")))
        frames: list[Frame] = []
        decoder = FrameDecoder(frames.append)
        while not frames:
            decoder.feed(await asyncio.wait_for(reader.read(65536), 10))
        assert [(frame.call_id, frame.payload[2]) for frame in frames] == [(2, b"echo:two")]
        data = scene.replica._data
        assert data is not None and data.calls_in_flight() == 0
        # A piece past the body's size closes the connection: at its head, before the rest of it is read.
        writer.write(encode(Kind.UPLOAD, 3, ("POST", "/size", b"", [], size)) + encode_piece(3, b"y" * (size + 1)))
        try:
            assert await asyncio.wait_for(reader.read(), 10) == b""
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed while our write of that piece was still going: the same refusal, seen sooner
        writer.close()

    run(scenario)


def test_a_streaming_answers_head_comes_over_the_socket_and_its_rest_from_the_replica() -> None:
    async def scenario(scene: Scene) -> None:
        await scene.calls.connections.settled(scene.handle)
        reply = await scene.calls.one(scene.handle, make_request("GET", "/stream"))
        assert isinstance(reply, StreamStart) and reply.status == 200
        rest = [chunk async for chunk in scene.replica.stream(reply.stream_id)]  # the Ray `stream` method's code
        assert reply.first_chunk + b"".join(rest) == b"chunk 0;chunk 1;chunk 2;"

    run(scenario)


def test_the_socket_is_private_and_leaves_with_draining_while_open_connections_are_served() -> None:
    async def scenario(scene: Scene) -> None:
        directory = os.path.dirname(scene.path)
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(scene.path).st_mode) == 0o600
        assert os.stat(directory).st_uid == os.getuid()
        assert len(scene.path.encode()) < 108
        assert await scene.replica.data_address() == DataAddress("", scene.path)
        await scene.calls.connections.settled(scene.handle)
        await scene.replica.prepare_for_shutdown(0)
        assert not os.path.exists(directory)
        assert await scene.replica.data_address() is None
        assert (await scene.calls.one(scene.handle, get("/", b"late")))[2] == b"echo:late"

    run(scenario)


async def _raw(path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_unix_connection(path)


def test_a_malformed_frame_closes_only_its_own_connection() -> None:
    async def scenario(scene: Scene) -> None:
        await scene.calls.connections.settled(scene.handle)
        reader, writer = await _raw(scene.path)
        writer.write(struct.pack(">I", 2**31))  # far over the bound
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed, nothing answered
        writer.close()
        assert (await scene.calls.one(scene.handle, get("/", b"still")))[2] == b"echo:still"

    run(scenario)


WRONG_SHAPES = {
    Kind.REQUEST: "not a request",
    Kind.UPLOAD: ("POST", "/", b"", [], 10),  # a body this small is never uploaded in pieces
    Kind.BODY: b"a piece of no upload",
    Kind.BATCH: (get("/"), 5.0),
    Kind.STREAM: Opening(("not", "a stream id"), Window()),
    Kind.WEBSOCKET: Opening("no request", Window()),
    Kind.PUSH: ("socket id", "not a message"),
    Kind.CREDIT: (True, -1),
    Kind.DISCARD: 7,
    Kind.CANCEL: "a payload",
    Kind.RESULT: None,
    Kind.ANSWER: (200, [], PIECES_ABOVE + 1),  # a reply: never the proxy's to send
}


@pytest.mark.parametrize("kind", sorted(WRONG_SHAPES, key=int), ids=lambda kind: kind.name)
def test_a_frame_whose_payload_has_another_shape_than_its_kinds_closes_the_connection(kind: Kind) -> None:
    async def scenario(scene: Scene) -> None:
        await scene.calls.connections.settled(scene.handle)
        reader, writer = await _raw(scene.path)
        writer.write(encode(kind, 1, WRONG_SHAPES[kind]))
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed, nothing answered
        writer.close()
        assert (await scene.calls.one(scene.handle, get("/", b"still")))[2] == b"echo:still"

    run(scenario)


def test_frames_written_together_are_all_answered() -> None:
    async def scenario(scene: Scene) -> None:
        reader, writer = await _raw(scene.path)
        writer.write(b"".join(encode(Kind.REQUEST, n, get("/", str(n).encode())) for n in range(1, 6)))
        frames: list[Frame] = []
        decoder = FrameDecoder(frames.append)
        while len(frames) < 5:
            decoder.feed(await asyncio.wait_for(reader.read(65536), 10))
        assert sorted((frame.call_id, frame.payload[2]) for frame in frames) == [
            (n, f"echo:{n}".encode()) for n in range(1, 6)
        ]
        writer.close()

    run(scenario)


def test_calls_are_forgotten_once_answered_or_cancelled_even_before_they_ran() -> None:
    async def scenario(scene: Scene) -> None:
        reader, writer = await _raw(scene.path)
        # 2 is cancelled in the same write that asks for it: it never runs, and is never answered.
        writer.write(encode(Kind.REQUEST, 1, get("/", b"one")) + encode(Kind.REQUEST, 2, get("/", b"two"))
                     + encode(Kind.CANCEL, 2) + encode(Kind.REQUEST, 3, get("/", b"three")))
        frames: list[Frame] = []
        decoder = FrameDecoder(frames.append)
        while len(frames) < 2:
            decoder.feed(await asyncio.wait_for(reader.read(65536), 10))
        assert sorted(frame.call_id for frame in frames) == [1, 3]
        data = scene.replica._data
        assert data is not None
        for _ in range(100):  # the answered calls forget themselves as their tasks end
            if data.calls_in_flight() == 0:
                break
            await asyncio.sleep(0.01)
        assert data.calls_in_flight() == 0
        writer.close()

    run(scenario)


def test_the_peer_credentials_the_server_checks_are_the_connecting_process() -> None:
    from datalink.peers import peer_uid

    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with left, right:
        assert peer_uid(left) == os.getuid()


def test_a_base_too_long_for_a_socket_path_is_passed_over_for_the_next() -> None:
    from replica.data_socket import SUN_PATH_MAX, socket_dir

    too_long = os.path.join(tempfile.gettempdir(), "x" * SUN_PATH_MAX)
    directory = socket_dir([too_long, tempfile.gettempdir()])
    assert directory is not None and os.path.dirname(directory) == tempfile.gettempdir()
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    os.rmdir(directory)
    assert socket_dir([too_long]) is None
