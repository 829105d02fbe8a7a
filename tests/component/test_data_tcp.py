"""The data path across nodes: a real replica serving frames on TCP (loopback
here), called through the proxy's call stack (`ReplicaCalls`, `DataConnections`) from "another node" in the
same process (no Ray); peers that cannot prove they know the replica's secret
are closed before a byte of theirs is decoded; and a lost connection is made
again after a back-off, on asyncio's loop and on uvloop."""

from __future__ import annotations

import asyncio
import gc
import pickle
import tempfile
from typing import Any, Awaitable, Callable

import pytest
import uvloop

from datalink.frames import Kind, encode
from datalink.handshake import HELLO_BYTES, MAGIC, Handshake, Role
from proxy.pool.calling import ReplicaDiedError
from proxy.pool.socketcalls import DataConnections, connect_tcp
from replica.host import Replica
from tests.support.data_path import APPS, App, Calls, FakeHandle, RecordingFallback
from vocabulary.control.actor_apis import ReplicaHandle
from vocabulary.request_path.wire import DataAddress, StreamStart, WireRequest, make_request
from vocabulary.spec.backends import BackendConfig

LOOPBACK = "127.0.0.1"

# What a pickle that runs code on decode did: it must stay empty.
DETONATED: list[str] = []


def detonate(what: str) -> str:
    DETONATED.append(what)
    return what


class Bomb:
    def __reduce__(self) -> Any:
        return (detonate, ("a pickle from an unproven peer was decoded",))


class Clock:
    """The data connections' clock, moved by the test: back-offs are checked by order, not by waiting."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Scene:
    def __init__(self, replica: Replica, calls: Calls, fallback: RecordingFallback,
                 clock: Clock, asked: list[DataAddress]) -> None:
        self.replica, self.calls, self.fallback, self.clock, self.asked = replica, calls, fallback, clock, asked
        self.handle = FakeHandle("r1")

    @property
    def address(self) -> DataAddress:
        # What `Replica.data_address` answers, without its await: the listener is already open.
        assert self.replica._data is not None
        address = self.replica._data.address("")
        assert address is not None and address.tcp is not None
        return address

    def tcp_connections(self) -> int:
        return self.replica.data_connections()["tcp"]

    def drop_connections(self) -> None:
        """As a network fault would: the replica keeps listening, its connections are gone."""
        assert self.replica._data is not None
        for connection in list(self.replica._data._connections):
            connection.close("the test cut it")


LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
_loop_factory: list[Callable[[], asyncio.AbstractEventLoop]] = [asyncio.new_event_loop]


@pytest.fixture(autouse=True, params=sorted(LOOPS))
def event_loop_kind(request: pytest.FixtureRequest) -> str:
    _loop_factory[0] = LOOPS[request.param]
    return str(request.param)


def run(
    scenario: Callable[[Scene], Awaitable[None]],
    handler: str = "App",
    secret: bytes | None = None,
    handshake_timeout_s: float | None = None,
) -> None:
    async def main() -> None:
        App.started, App.cancelled = asyncio.Event(), asyncio.Event()
        DETONATED.clear()
        replica = Replica(BackendConfig(name="echo", version="v1", import_path=f"{APPS}:{handler}"), "r1")
        await replica.initialize()
        await replica.serve_frames([tempfile.gettempdir()], tcp_host=LOOPBACK)
        assert replica._data is not None
        if handshake_timeout_s is not None:
            replica._data._handshake_timeout_s = handshake_timeout_s
        asked: list[DataAddress] = []

        async def ask(handle: ReplicaHandle) -> DataAddress | None:
            address = await replica.data_address()
            assert address is not None
            if secret is not None:
                address = DataAddress(address.node, address.path, address.tcp, secret)
            asked.append(address)
            return address

        fallback, clock = RecordingFallback(), Clock()
        # The replica's node id is "" without Ray: the proxy is on another node.
        calls = Calls(fallback, DataConnections(lambda: "node-b", ask, clock=clock))
        try:
            async with asyncio.timeout(60):  # a hang fails the test instead of the run
                await scenario(Scene(replica, calls, fallback, clock, asked))
        finally:
            calls.connections.close()
            await replica.prepare_for_shutdown(0)
        assert DETONATED == []

    with asyncio.Runner(loop_factory=_loop_factory[0]) as runner:
        runner.run(main())


def get(path: str, body: bytes = b"") -> WireRequest:
    return make_request("POST", path, body=body)


async def until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.005)


def test_calls_and_a_stream_travel_over_tcp_to_a_replica_on_another_node() -> None:
    async def scenario(scene: Scene) -> None:
        assert await scene.calls.connections.settled(scene.handle) is True
        assert scene.calls.connections.via(scene.handle) == "tcp"
        assert await scene.calls.one(scene.handle, get("/", b"one")) == (200, [(b"content-length", b"8")], b"echo:one")
        replies = await asyncio.gather(*(scene.calls.one(scene.handle, get("/", body)) for body in (b"a", b"b")))
        assert [response[2] for response in replies] == [b"echo:a", b"echo:b"]
        start = await scene.calls.one(scene.handle, make_request("GET", "/stream"))
        assert isinstance(start, StreamStart)
        rest = [chunk async for chunk in scene.calls.stream(scene.handle, start)]
        assert start.first_chunk + b"".join(rest) == b"chunk 0;chunk 1;chunk 2;"
        assert scene.fallback.calls == []
        assert scene.replica.frames_served() == 4 and scene.replica.frames_streamed() == 1
        assert scene.replica.data_connections() == {"unix": 0, "tcp": 1}

    run(scenario)


def test_a_batched_handler_gets_its_list_over_tcp() -> None:
    async def scenario(scene: Scene) -> None:
        assert await scene.calls.connections.settled(scene.handle) is True
        results = await scene.calls.batch(scene.handle, [(get("/", b"x"), 5.0), (get("/", b"y"), 5.0)])
        assert [response[2] for _, response in results] == [b"2:x", b"2:y"]
        assert scene.fallback.calls == []

    run(scenario, handler="Batched")


def test_the_replica_listens_at_the_address_it_is_given_and_never_on_a_wildcard() -> None:
    async def scenario(scene: Scene) -> None:
        host, port = scene.address.tcp  # type: ignore[misc]
        assert host == LOOPBACK and port > 0 and len(scene.address.secret) == 32
        assert scene.address.secret.hex() not in repr(scene.address) + repr(scene.replica._data)
        wildcard = Replica(BackendConfig(name="echo", version="v1", import_path=f"{APPS}:App"), "r2")
        await wildcard.initialize()
        await wildcard.serve_frames([tempfile.gettempdir()], tcp_host="0.0.0.0")
        address = await wildcard.data_address()
        assert address is not None and address.path is not None and address.tcp is None and address.secret == b""
        await wildcard.prepare_for_shutdown(0)

    run(scenario)


def test_the_tcp_listener_opens_only_when_a_proxy_on_another_node_asks_and_never_while_draining() -> None:
    async def main() -> None:
        replica = Replica(BackendConfig(name="echo", version="v1", import_path=f"{APPS}:App"), "r3")
        await replica.initialize()
        await replica.serve_frames([tempfile.gettempdir()])
        replica._tcp_host = LOOPBACK  # what `initialize` takes from Ray: the node's address
        # The replica's node id is "" without Ray.
        assert (await replica.data_address()).tcp is None  # type: ignore[union-attr]
        assert (await replica.data_address(for_node="")).tcp is None  # type: ignore[union-attr]  # its own node's proxy
        address = await replica.data_address(for_node="node-b")
        assert address is not None and address.tcp is not None and address.tcp[0] == LOOPBACK
        assert (await replica.data_address()).tcp == address.tcp  # type: ignore[union-attr]  # opened once, kept
        await replica.prepare_for_shutdown(0)
        assert await replica.data_address(for_node="node-c") is None  # draining: no way in, none opened

        late = Replica(BackendConfig(name="echo", version="v1", import_path=f"{APPS}:App"), "r4")
        await late.initialize()
        await late.serve_frames([tempfile.gettempdir()])
        late._tcp_host = LOOPBACK
        assert late._data is not None
        late._data.stop_listening()  # what draining does first
        assert await late.data_address(for_node="node-b") is None
        await late.prepare_for_shutdown(0)

    asyncio.run(main())


def test_a_proxy_with_the_wrong_secret_is_refused_and_its_replica_stays_on_ray() -> None:
    async def scenario(scene: Scene) -> None:
        assert await scene.calls.connections.settled(scene.handle) is False
        assert await scene.calls.one(scene.handle, get("/")) == (203, [], b"over ray")
        assert scene.tcp_connections() == 0 and scene.replica.frames_served() == 0

    run(scenario, secret=b"w" * 32)


async def _closed_after(address: DataAddress, first: bytes) -> bytes:
    """Connect as a peer that sends `first`; everything the replica wrote until it closed the connection."""
    assert address.tcp is not None
    reader, writer = await asyncio.open_connection(*address.tcp)
    writer.write(first)
    received = b""
    try:
        while chunk := await reader.read(65536):  # until the replica closed it
            received += chunk
    except ConnectionResetError:
        pass  # closed with our bytes unread: a reset instead of an EOF
    writer.close()
    return received


@pytest.mark.parametrize(
    "first",
    [
        pytest.param(encode(Kind.REQUEST, 1, Bomb()), id="a pickled frame without a handshake"),
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", id="garbage"),
        pytest.param(MAGIC + b"n" * 32 + b"p" * 32 + encode(Kind.REQUEST, 1, Bomb()), id="a wrong proof, then a pickle"),
        pytest.param(MAGIC + b"n" * 32 + pickle.dumps(Bomb()) * 20_000, id="an oversized proof"),
    ],
)
def test_a_peer_that_cannot_prove_itself_is_closed_before_anything_it_sent_is_decoded(first: bytes) -> None:
    async def scenario(scene: Scene) -> None:
        received = await _closed_after(scene.address, first)
        # At most the replica's hello and its own proof went out; never a frame.
        assert received[: len(MAGIC)] == MAGIC and len(received) <= HELLO_BYTES + 32
        assert DETONATED == [] and scene.replica.frames_served() == 0 and scene.tcp_connections() == 0
        # The listener serves the next (proven) peer as before.
        assert await scene.calls.connections.settled(scene.handle) is True
        assert (await scene.calls.one(scene.handle, get("/", b"fine")))[2] == b"echo:fine"

    run(scenario)


def test_a_peer_that_is_too_slow_to_prove_itself_is_closed() -> None:
    async def scenario(scene: Scene) -> None:
        received = await _closed_after(scene.address, MAGIC[:4])  # and then nothing
        assert received[: len(MAGIC)] == MAGIC and len(received) == HELLO_BYTES
        assert scene.tcp_connections() == 0

    run(scenario, handshake_timeout_s=0.2)


def test_a_replica_that_cannot_prove_itself_is_refused_before_its_frames_are_decoded() -> None:
    async def scenario(scene: Scene) -> None:
        async def impostor(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            # Knows the protocol, not the secret: a made-up proof, then a pickle.
            fake = Handshake(Role.REPLICA, b"i" * 32)
            writer.write(fake.greeting())
            out, _ = fake.feed(await reader.readexactly(HELLO_BYTES))
            writer.write(out + encode(Kind.RESULT, 1, Bomb()))
            await reader.read()
            writer.close()

        server = await asyncio.start_server(impostor, LOOPBACK, 0)
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(ConnectionError, match="does not know"):
            await connect_tcp(LOOPBACK, port, scene.address.secret, "impostor")
        server.close()
        assert DETONATED == []

    run(scenario)


def test_a_lost_connection_fails_its_calls_and_is_made_again_after_a_growing_back_off() -> None:
    async def scenario(scene: Scene) -> None:
        proxy, handle, clock = scene.calls, scene.handle, scene.clock
        assert await proxy.connections.settled(handle) is True and len(scene.asked) == 1
        calls = [asyncio.ensure_future(proxy.one(handle, get("/slow"))) for _ in range(2)]
        assert App.started is not None
        await App.started.wait()
        scene.drop_connections()
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        assert all(isinstance(outcome, ReplicaDiedError) for outcome in outcomes), outcomes

        # Within the back-off: Ray carries the calls and nobody tries to connect.
        assert await proxy.one(handle, get("/")) == (203, [], b"over ray")
        clock.now += 0.09
        assert await proxy.one(handle, get("/")) == (203, [], b"over ray")
        assert len(scene.asked) == 1 and proxy.connections.via(handle) is None
        # Past it: the next call still goes over Ray while a new connection is made in the background.
        clock.now += 0.02
        assert await proxy.one(handle, get("/")) == (203, [], b"over ray")
        assert await proxy.connections.settled(handle) is True and len(scene.asked) == 2
        assert (await proxy.one(handle, get("/", b"again")))[2] == b"echo:again"
        assert scene.tcp_connections() == 2

        # Lost again soon after: the back-off doubled (0.2 s).
        scene.drop_connections()
        await until(lambda: proxy.connections.via(handle) is None)
        clock.now += 0.15
        await proxy.one(handle, get("/"))
        assert len(scene.asked) == 2
        clock.now += 0.06
        await proxy.one(handle, get("/"))
        assert await proxy.connections.settled(handle) is True and len(scene.asked) == 3

        # A replica that no longer listens (its process going): the attempt fails, and the next waits longer still.
        assert scene.replica._data is not None and scene.replica._data._tcp_server is not None
        scene.replica._data._tcp_server.close()
        scene.drop_connections()
        await until(lambda: proxy.connections.via(handle) is None)
        clock.now += 0.41
        await proxy.one(handle, get("/"))
        assert await proxy.connections.settled(handle) is False and len(scene.asked) == 4
        clock.now += 0.79
        await proxy.one(handle, get("/"))
        assert await proxy.connections.settled(handle) is False and len(scene.asked) == 4
        clock.now += 0.02
        await proxy.one(handle, get("/"))
        assert await proxy.connections.settled(handle) is False and len(scene.asked) == 5

    run(scenario)


def test_a_connection_that_lasted_starts_its_back_off_over() -> None:
    async def scenario(scene: Scene) -> None:
        proxy, handle, clock = scene.calls, scene.handle, scene.clock
        for attempt in range(1, 4):
            assert await proxy.connections.settled(handle) is True and len(scene.asked) == attempt
            clock.now += 60.0  # a long-lived connection
            scene.drop_connections()
            await until(lambda: proxy.connections.via(handle) is None)
            clock.now += 0.1  # the first back-off step each time
            await proxy.one(handle, get("/"))

    run(scenario)


def test_a_replica_that_leaves_the_table_is_forgotten_and_its_connection_closed() -> None:
    async def scenario(scene: Scene) -> None:
        assert await scene.calls.connections.settled(scene.handle) is True
        assert scene.replica._data is not None and len(scene.replica._data._connections) == 1
        del scene.handle
        gc.collect()
        assert len(scene.calls.connections._links) == 0
        await until(lambda: not scene.replica._data._connections)  # type: ignore[union-attr]

    run(scenario)
