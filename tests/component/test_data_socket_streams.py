"""Streams and WebSockets over the data path: a real replica pushing frames on
a real Unix socket (the same node) or on TCP over loopback (another node) to
the proxy's call stack (`ReplicaCalls`) in the same process (no Ray), on asyncio's own
loop and on uvloop (Ray's actors run on it).

The proxy reads a stream's chunks in order, grants credit only as it passes
them on (so a proxy that reads nothing holds the replica to its window),
stops the user's generator when it leaves, and sees a handler's error or a
lost connection as `HandlerError` / `ReplicaDiedError`; a WebSocket's
messages go both ways with their close codes."""

from __future__ import annotations

import asyncio
import tempfile
from typing import Any, AsyncGenerator, Awaitable, Callable

import pytest
import uvloop
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from datalink.frames import Frame, FrameDecoder, Kind, Opening, Window, encode
from proxy.pipeline.streaming import StreamEnd, relay
from proxy.pool.calling import HandlerError, ReplicaDiedError
from proxy.pool.socketcalls import DataConnections
from replica.calling.asgi import _AHEAD_MESSAGES, _GATHER_MOST
from replica.host import Replica
from tests.support.data_path import Calls, FakeHandle, RecordingFallback
from vocabulary.control.actor_apis import ReplicaHandle
from vocabulary.request_path.wire import CallResult, DataAddress, StreamStart, TimedRequest, WireRequest, make_request
from vocabulary.spec.backends import BackendConfig

MODULE = __name__


class Probe:
    """What the user's generators did, for the test to see."""

    produced = 0
    stopped: asyncio.Event | None = None
    seen_close: list[int] = []


class Streamer:
    """/count?n: n numbered chunks; /forever: chunks until stopped; /slow-big:
    300-byte chunks until stopped, each after a pause; /paced?n: n 8-byte chunks,
    each after a pause; /paced-4k: 4 KiB chunks until stopped, each after a pause;
    /boom: three chunks, then raises."""

    async def __call__(self, request: Request) -> Response:
        path = request.url.path

        async def counted(size: int, limit: int | None, fail_after: int | None = None,
                          pause: bool = False) -> AsyncGenerator[bytes, None]:
            assert Probe.stopped is not None
            n = 0
            try:
                while limit is None or n < limit:
                    if fail_after is not None and n == fail_after:
                        raise ValueError("the generator exploded")
                    if pause:
                        await asyncio.sleep(0.001)  # one chunk at a time: none are joined
                    Probe.produced += 1
                    yield f"{n};".encode().ljust(size, b".")
                    n += 1
            finally:
                Probe.stopped.set()

        if path == "/count":
            return StreamingResponse(counted(1, int(request.query_params["n"])))
        if path == "/forever":
            return StreamingResponse(counted(1, None))
        if path == "/slow-big":
            return StreamingResponse(counted(300, None, pause=True))
        if path == "/paced":
            return StreamingResponse(counted(8, int(request.query_params["n"]), pause=True))
        if path == "/paced-4k":
            return StreamingResponse(counted(4096, None, pause=True))
        return StreamingResponse(counted(1, None, fail_after=3))


async def chat(scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]],
               send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
    """A raw ASGI WebSocket app: accepts, echoes text, closes with 4000 on 'bye',
    and records the client's close code."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    assert scope["type"] == "websocket" and (await receive())["type"] == "websocket.connect"
    await send({"type": "websocket.accept"})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            Probe.seen_close.append(message.get("code", 1000))
            return
        if message.get("text") == "bye":
            await send({"type": "websocket.close", "code": 4000, "reason": "bye"})
            return
        await send({"type": "websocket.send", "text": f"echo: {message.get('text')}"})


class NoRay(RecordingFallback):
    """The fallbacks, streams included: what went over "Ray" is recorded, and a batch fails the test."""

    async def coalesced(self, handle: ReplicaHandle, items: list[TimedRequest]) -> list[CallResult]:
        raise AssertionError("no batches here")

    batch = coalesced

    def stream(self, handle: ReplicaHandle, start: StreamStart) -> AsyncGenerator[bytes, None]:
        self.calls.append("stream")
        return self._nothing()

    def discard(self, handle: ReplicaHandle, start: StreamStart) -> None:
        self.calls.append("discard")

    def open_websocket(
        self, handle: ReplicaHandle, websocket_id: str, request: WireRequest
    ) -> AsyncGenerator[dict[str, Any], None]:
        self.calls.append("open_websocket")
        return self._nothing()

    async def push(self, handle: ReplicaHandle, websocket_id: str, message: dict[str, Any]) -> bool:
        self.calls.append("push")
        return False

    async def _nothing(self) -> AsyncGenerator[Any, None]:
        return
        yield


class Scene:
    def __init__(self, replica: Replica, path: str, calls: Calls, ray: NoRay) -> None:
        self.replica, self.path, self.calls, self.ray = replica, path, calls, ray
        self.handle = FakeHandle("r1")

    async def start(self, target: str) -> StreamStart:
        assert await self.calls.connections.settled(self.handle) is True
        assert self.calls.connections.via(self.handle) == _via[0]
        reply = await self.calls.one(self.handle, make_request("GET", target.partition("?")[0],
                                                                   target.partition("?")[2].encode()))
        assert isinstance(reply, StreamStart), reply
        return reply


LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
_loop_factory: list[Callable[[], asyncio.AbstractEventLoop]] = [asyncio.new_event_loop]


@pytest.fixture(autouse=True, params=sorted(LOOPS))
def event_loop_kind(request: pytest.FixtureRequest) -> str:
    _loop_factory[0] = LOOPS[request.param]
    return str(request.param)


_via = ["unix"]


@pytest.fixture(autouse=True, params=["unix", "tcp"])
def via(request: pytest.FixtureRequest) -> str:
    """The same node (its Unix socket), or another node (TCP, after the handshake)."""
    _via[0] = str(request.param)
    return _via[0]


def run(scenario: Callable[[Scene], Awaitable[None]], handler: str = "Streamer", window: Window = Window()) -> None:
    async def main() -> None:
        Probe.produced, Probe.stopped, Probe.seen_close = 0, asyncio.Event(), []
        replica = Replica(BackendConfig(name="streams", version="v1", import_path=f"{MODULE}:{handler}"), "r1")
        await replica.initialize()
        tcp = _via[0] == "tcp"
        path = await replica.serve_frames([tempfile.gettempdir()], tcp_host="127.0.0.1" if tcp else None)
        assert path is not None

        async def ask(handle: ReplicaHandle) -> Any:
            return await replica.data_address() if tcp else DataAddress("node-a", path)

        ray = NoRay()
        # The replica's node id is "" without Ray: "node-b" is another node, reached over TCP.
        calls = Calls(ray, DataConnections(lambda: "node-b" if tcp else "node-a", ask, window=window), streams=ray)
        try:
            async with asyncio.timeout(60):  # a hang fails the test instead of the run
                await scenario(Scene(replica, path, calls, ray))
        finally:
            calls.connections.close()
            await replica.prepare_for_shutdown(0)

    with asyncio.Runner(loop_factory=_loop_factory[0]) as runner:
        runner.run(main())


async def settled(count: Callable[[], int]) -> int:
    """`count()` once it stopped changing (a producer that never stops fails by the scenario's timeout)."""
    previous = -1
    while count() != previous:
        previous = count()
        await asyncio.sleep(0.1)
    return previous


async def until(condition: Callable[[], bool]) -> None:
    """Wait (within the scenario's overall timeout) until `condition()` holds."""
    while not condition():
        await asyncio.sleep(0.005)


def test_a_streams_chunks_arrive_over_the_socket_in_order() -> None:
    async def scenario(scene: Scene) -> None:
        start = await scene.start("/count?n=200")
        rest = [chunk async for chunk in scene.calls.stream(scene.handle, start)]
        assert start.first_chunk + b"".join(rest) == "".join(f"{n};" for n in range(200)).encode()
        assert scene.replica.frames_streamed() == 1
        assert scene.replica.num_ongoing() == 0
        assert scene.ray.calls == []

    run(scenario, window=Window(items=4, bytes=1 << 20))  # many credit round trips


class RawProxy:
    """A proxy speaking frames by hand: it reads only when the test says so."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.frames: list[Frame] = []
        self.decoder = FrameDecoder(lambda frame: self.frames.append(frame))

    @classmethod
    async def connect(cls, path: str) -> RawProxy:
        return cls(*await asyncio.open_unix_connection(path))

    def write(self, kind: Kind, call_id: int, payload: Any = None) -> None:
        self.writer.write(encode(kind, call_id, payload))

    async def read_until(self, count: int) -> list[Frame]:
        while len(self.frames) < count:
            self.decoder.feed(await self.reader.read(1 << 20))
        taken, self.frames = self.frames[:count], self.frames[count:]
        return taken

    async def nothing_more(self) -> bool:
        """Whether nothing more arrives in a while (a replica past its window would send on)."""
        try:
            data = await asyncio.wait_for(self.reader.read(1 << 20), 0.3)
        except TimeoutError:
            return not self.frames
        self.decoder.feed(data)
        return False


async def raw_stream(scene: Scene, target: str, window: Window) -> tuple[RawProxy, StreamStart]:
    proxy = await RawProxy.connect(scene.path)
    proxy.write(Kind.REQUEST, 1, make_request("GET", target))
    [head] = await proxy.read_until(1)
    assert head.kind is Kind.RESULT and isinstance(head.payload, StreamStart)
    proxy.write(Kind.STREAM, 2, Opening(head.payload.stream_id, window))
    return proxy, head.payload


def test_a_proxy_that_reads_nothing_gets_at_most_the_window_of_items() -> None:
    async def scenario(scene: Scene) -> None:
        proxy, head = await raw_stream(scene, "/forever", Window(items=3, bytes=1 << 30))
        frames = await proxy.read_until(3)
        assert [frame.kind for frame in frames] == [Kind.ITEM] * 3
        assert await proxy.nothing_more()  # no credit granted: the replica waits
        # And so does the user's generator, however fast it is: bounded by the head and
        # the three items sent (each joins at most `_GATHER_MOST` of the app's messages,
        # `replica.calling.asgi`) and what the app may have waiting.
        assert await settled(lambda: Probe.produced) <= 2 + _AHEAD_MESSAGES + 3 * _GATHER_MOST + _AHEAD_MESSAGES
        sent = b"".join(frame.payload for frame in frames)
        proxy.write(Kind.CREDIT, 2, (2, len(frames[0].payload) + len(frames[1].payload)))
        more = await proxy.read_until(2)  # two more, then it waits again
        assert [frame.kind for frame in more] == [Kind.ITEM] * 2
        assert await proxy.nothing_more()
        numbers = [int(n) for n in (head.first_chunk + sent + b"".join(frame.payload for frame in more)).split(b";") if n]
        assert numbers == list(range(len(numbers)))  # in order, none lost
        proxy.write(Kind.CANCEL, 2)
        assert Probe.stopped is not None
        await Probe.stopped.wait()
        proxy.writer.close()

    run(scenario)


def test_a_proxy_that_reads_nothing_gets_at_most_the_window_of_bytes() -> None:
    async def scenario(scene: Scene) -> None:
        proxy, _ = await raw_stream(scene, "/slow-big", Window(items=100, bytes=1000))
        # 300-byte chunks (joined when several are ready) against 1000 bytes:
        # items come until they reach it, and then no more.
        sizes: list[int] = []
        while sum(sizes) < 1000:
            [frame] = await proxy.read_until(1)
            assert frame.kind is Kind.ITEM and len(frame.payload) % 300 == 0
            sizes.append(len(frame.payload))
        assert sum(sizes[:-1]) < 1000
        assert await proxy.nothing_more()
        proxy.write(Kind.CREDIT, 2, (len(sizes), sum(sizes)))
        [more] = await proxy.read_until(1)  # credited: it goes on
        assert more.kind is Kind.ITEM
        proxy.writer.close()
        assert Probe.stopped is not None
        await Probe.stopped.wait()  # a connection that closes stops its streams

    run(scenario)


def test_a_proxy_that_reads_nothing_finds_every_streams_items_waiting_in_their_producers() -> None:
    async def scenario(scene: Scene) -> None:
        # 40 streams, each allowed 32 items ahead (some 5 MiB in all): once the
        # connection's buffer is full, each stream's next item waits in its producer
        # (a stream of its own pace), not in the replica's transport, where every other
        # stream's next frame would queue behind it.
        proxy = await RawProxy.connect(scene.path)
        for n in range(40):
            proxy.write(Kind.REQUEST, 2 * n + 1, make_request("GET", "/paced-4k"))
        heads = await proxy.read_until(40)
        assert {head.kind for head in heads} == {Kind.RESULT}
        for n, head in enumerate(heads):
            proxy.write(Kind.STREAM, 2 * n + 2, Opening(head.payload.stream_id, Window(items=32, bytes=1 << 30)))
        assert scene.replica._data is not None
        [connection] = scene.replica._data._connections
        transport = connection._transport
        assert transport is not None
        await settled(lambda: Probe.produced)
        # Its high-water mark, what joined the buffer within the iteration that
        # reached it, and at most one item per stream (each at most a few chunks).
        assert transport.get_write_buffer_size() < 2 * 1024 * 1024
        proxy.writer.close()

    run(scenario)


def test_a_stalled_client_never_delays_another_clients_events() -> None:
    async def scenario(scene: Scene) -> None:
        # 1,000 clients of one replica over one connection; 100 of them read nothing
        # (their first chunk's send never returns, as a client whose TCP window is
        # shut). Every other client gets every event, in order, to its end.
        clients = 1000
        events, stalled = 30, set(range(0, clients, 10))
        expected = b"".join(f"{n};".encode().ljust(8, b".") for n in range(events))
        received: dict[int, list[bytes]] = {n: [] for n in range(clients)}

        async def connected() -> dict[str, Any]:
            await asyncio.Event().wait()
            return {}

        def client(n: int) -> Callable[[dict[str, Any]], Awaitable[None]]:
            async def send(message: dict[str, Any]) -> None:
                if n in stalled:
                    await asyncio.Event().wait()
                received[n].append(message["body"])

            return send

        starts = [await scene.start(f"/paced?n={events}") for _ in range(clients)]
        relays = {n: asyncio.ensure_future(relay(scene.calls.stream(scene.handle, start), client(n), 60.0,
                                                 connected, clients))
                  for n, start in enumerate(starts)}
        flowing = [relays[n] for n in relays if n not in stalled]
        assert set(await asyncio.gather(*flowing)) == {StreamEnd.COMPLETE}
        for n, start in enumerate(starts):
            if n not in stalled:
                assert start.first_chunk + b"".join(received[n]) == expected, n
        # The stalled ones are still held (their replica waits for their credit), none ended.
        assert not any(relays[n].done() for n in stalled)
        assert all(received[n] == [] for n in stalled)
        for n in stalled:
            relays[n].cancel()
        await asyncio.gather(*(relays[n] for n in stalled), return_exceptions=True)
        await until(lambda: scene.replica.num_ongoing() == 0)  # the clients left: their generators stopped

    run(scenario)


def test_leaving_a_stream_early_stops_the_users_generator() -> None:
    async def scenario(scene: Scene) -> None:
        start = await scene.start("/forever")
        chunks = scene.calls.stream(scene.handle, start)
        taken = b"".join([await anext(chunks) for _ in range(3)])  # the app's chunks, joined as they come
        assert (start.first_chunk + taken).startswith(b"0;1;2;")
        await chunks.aclose()
        assert Probe.stopped is not None
        await Probe.stopped.wait()
        await until(lambda: scene.replica.num_ongoing() == 0)
        assert (await scene.calls.one(scene.handle, make_request("GET", "/count", b"n=1")))  # still connected
        assert scene.ray.calls == []

    run(scenario)


def test_a_handler_that_raises_mid_stream_ends_it_with_a_handler_error_after_its_chunks() -> None:
    async def scenario(scene: Scene) -> None:
        start = await scene.start("/boom")
        received = []
        with pytest.raises(HandlerError, match="the generator exploded"):
            async for chunk in scene.calls.stream(scene.handle, start):
                received.append(chunk)
        assert start.first_chunk + b"".join(received) == b"0;1;2;"
        assert scene.replica.num_ongoing() == 0

    run(scenario)


def test_a_connection_lost_mid_stream_is_a_replica_death_and_stops_the_generator() -> None:
    async def scenario(scene: Scene) -> None:
        start = await scene.start("/forever")
        chunks = scene.calls.stream(scene.handle, start)
        await anext(chunks)
        assert scene.replica._data is not None
        scene.replica._data.close()  # as a replica process that dies closes it
        with pytest.raises(ReplicaDiedError):
            while True:
                await anext(chunks)
        assert Probe.stopped is not None
        await Probe.stopped.wait()

    run(scenario)


def test_the_relay_sends_a_socket_stream_to_its_client_and_a_client_that_leaves_stops_it() -> None:
    async def scenario(scene: Scene) -> None:
        sent: list[bytes] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message["body"])

        async def connected() -> dict[str, Any]:
            await asyncio.Event().wait()
            return {}

        start = await scene.start("/count?n=50")
        end = await relay(scene.calls.stream(scene.handle, start), send, 30.0, connected, 200)
        assert end is StreamEnd.COMPLETE and start.first_chunk + b"".join(sent) == b"".join(
            f"{n};".encode() for n in range(50))

        gone = asyncio.Event()

        async def leaves() -> dict[str, Any]:
            await gone.wait()
            return {"type": "http.disconnect"}

        async def slow_send(message: dict[str, Any]) -> None:
            sent.append(message["body"])
            if len(sent) > 60:
                gone.set()
            await asyncio.sleep(0.001)

        start = await scene.start("/forever")
        Probe.stopped = asyncio.Event()
        end = await relay(scene.calls.stream(scene.handle, start), slow_send, 30.0, leaves, 200)
        assert end is StreamEnd.CLIENT_LEFT
        await Probe.stopped.wait()
        assert scene.replica.frames_streamed() == 2 and scene.ray.calls == []

    run(scenario)


def test_a_discarded_stream_is_let_go_over_the_socket() -> None:
    async def scenario(scene: Scene) -> None:
        start = await scene.start("/forever")
        scene.calls.discard(scene.handle, start)
        assert Probe.stopped is not None
        await Probe.stopped.wait()  # closed, which stops the generator
        assert len(scene.replica._streams) == 0 and scene.ray.calls == []

    run(scenario)


def test_a_websocket_echoes_both_ways_with_the_apps_close_code() -> None:
    async def scenario(scene: Scene) -> None:
        assert await scene.calls.connections.settled(scene.handle) is True
        request = make_request("GET", "/chat")
        outbound = scene.calls.open_websocket(scene.handle, "s1", request)
        assert await anext(outbound) == {"type": "websocket.accept"}
        for text in ("one", "two"):
            assert await scene.calls.push(scene.handle, "s1", {"type": "websocket.receive", "text": text}) is True
            assert await anext(outbound) == {"type": "websocket.send", "text": f"echo: {text}"}
        assert await scene.calls.push(scene.handle, "s1", {"type": "websocket.receive", "text": "bye"}) is True
        assert await anext(outbound) == {"type": "websocket.close", "code": 4000, "reason": "bye"}
        with pytest.raises(StopAsyncIteration):
            await anext(outbound)
        # The replica holds that socket no more.
        assert await scene.calls.push(scene.handle, "s1", {"type": "websocket.receive", "text": "late"}) is False
        assert scene.replica.frames_streamed() == 1 and scene.ray.calls == []

    run(scenario, handler="chat")


def test_a_websocket_clients_close_code_reaches_the_app() -> None:
    async def scenario(scene: Scene) -> None:
        await scene.calls.connections.settled(scene.handle)
        outbound = scene.calls.open_websocket(scene.handle, "s2", make_request("GET", "/chat"))
        assert (await anext(outbound))["type"] == "websocket.accept"
        assert await scene.calls.push(scene.handle, "s2", {"type": "websocket.disconnect", "code": 1001}) is True
        with pytest.raises(StopAsyncIteration):
            await anext(outbound)  # the app returned
        assert Probe.seen_close == [1001]
        assert scene.replica.num_ongoing() == 0

    run(scenario, handler="chat")


def test_a_connection_lost_under_a_websocket_is_a_replica_death() -> None:
    async def scenario(scene: Scene) -> None:
        await scene.calls.connections.settled(scene.handle)
        outbound = scene.calls.open_websocket(scene.handle, "s3", make_request("GET", "/chat"))
        assert (await anext(outbound))["type"] == "websocket.accept"
        assert scene.replica._data is not None
        scene.replica._data.close()
        with pytest.raises(ReplicaDiedError):
            await anext(outbound)
        await until(lambda: scene.replica.num_ongoing() == 0)  # the app was stopped

    run(scenario, handler="chat")


def test_without_a_connection_streams_and_websockets_go_to_the_fallback() -> None:
    async def scenario(scene: Scene) -> None:
        other = FakeHandle("elsewhere")  # its address is still being asked: Ray for now
        start = StreamStart(200, [], b"", "r1:99")
        assert [chunk async for chunk in scene.calls.stream(other, start)] == []
        scene.calls.discard(other, start)
        assert [m async for m in scene.calls.open_websocket(other, "s4", make_request("GET", "/chat"))] == []
        assert await scene.calls.push(other, "s4", {"type": "websocket.receive", "text": "x"}) is False
        assert scene.ray.calls == ["stream", "discard", "open_websocket", "push"]

    run(scenario, handler="chat")
