"""WebSockets through the proxy's ASGI app, with a fake replica (no Ray):
what reaches the replica from the client, in order, how the client's
connection ends, and what each session counts as in the proxy's metrics and
rollout counts. In-process, and behind the proxy's HTTP server on 127.0.0.1
for what a WebSocket client actually sees."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
from typing import Any, AsyncIterator

import pytest
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from httpedge.server import Server
from proxy.app import ProxyApp
from proxy.observability.metrics import ProxyMetrics
from proxy.routes.subscriptions import Subscriptions
from proxy.settings import ProxySettings
from tests.support.metrics import value
from tests.support.websockets import Client, EchoReplica, Message, Recorded, SocketCaller
from vocabulary.control.longpoll import ReplicaInfo, ReplicaSet, RouteEntry, RouteTable
from vocabulary.spec.endpoints import EndpointConfig


def proxy(replica: EchoReplica | None, recorder: Any = None, *more: EchoReplica, seed: int = 0) -> ProxyApp:
    """`replica` None: the backend has no replica; `more`: its other replicas."""
    rng = random.Random(seed)
    app = ProxyApp(SocketCaller(), ProxySettings(), rng, recorder)  # type: ignore[arg-type]
    replicas = () if replica is None else tuple(
        ReplicaInfo(replica_id=f"r{i + 1}", actor_name=f"r{i + 1}", handle=r) for i, r in enumerate((replica, *more)))
    app.install(Subscriptions(ProxySettings(), rng).apply({
        "routes": (1, RouteTable(entries=(RouteEntry(route="/chat", methods=("GET",), endpoint="chat"),))),
        "endpoint:chat": (2, EndpointConfig(name="chat", route="/chat", traffic={"v1": 1.0})),
        "replicas:v1": (3, ReplicaSet(backend="v1", max_concurrent_queries=10, replicas=replicas)),
    }))
    return app


class Realistic(Client):
    """A client that, as a real one must, sends its messages only once the handshake is accepted."""

    def __init__(self, script: list[Message], echoes: int = 0) -> None:
        super().__init__(script, echoes)
        self.accepted = asyncio.Event()

    async def receive(self) -> Message:
        if self.script and self.script[0]["type"] != "websocket.connect":
            await self.accepted.wait()
        return await super().receive()

    async def send(self, message: Message) -> None:
        if message["type"] == "websocket.accept":
            self.accepted.set()
        await super().send(message)


def scope(path: str) -> dict[str, Any]:
    return {"type": "websocket", "path": path, "raw_path": path.encode(), "query_string": b"",
            "headers": [(b"sec-websocket-key", b"k"), (b"x-user", b"u1")]}


def connect(replica: EchoReplica, client: Client, path: str = "/chat/room") -> None:
    asyncio.run(asyncio.wait_for(proxy(replica)(scope(path), client.receive, client.send), 5))


def test_client_messages_reach_the_replica_in_order_and_its_close_code_too() -> None:
    replica = EchoReplica()
    client = Client([{"type": "websocket.receive", "text": "a"}, {"type": "websocket.receive", "text": "b"},
                     {"type": "websocket.disconnect", "code": 4001}], echoes=2)
    connect(replica, client)
    assert [m.get("text", m.get("code")) for m in replica.pushed] == ["a", "b", 4001]
    assert [m.get("text") for m in client.sent] == [None, "echo: a", "echo: b"]


def test_the_replica_sees_the_route_prefix_and_the_clients_headers_without_the_handshakes() -> None:
    replica = EchoReplica()
    connect(replica, Client([{"type": "websocket.disconnect", "code": 1000}]))
    (request,) = replica.requests
    assert request[1] == "/chat/room" and (b"x-user", b"u1") in request[3] and (b":root-path", b"/chat") in request[3]
    assert b"sec-websocket-key" not in {name for name, _ in request[3]}


def test_a_replica_that_dies_closes_the_socket_with_1011() -> None:
    client = Client([{"type": "websocket.receive", "text": "a"}])
    connect(EchoReplica(dies=True), client)
    assert client.sent[-1] == {"type": "websocket.close", "code": 1011}


def test_a_handshake_whose_replica_died_before_answering_goes_to_another_replica() -> None:
    tried_gone = 0
    for seed in range(8):  # either replica may be chosen first
        gone, alive, recorded = EchoReplica(gone=True), EchoReplica(), Recorded()
        client = Realistic([{"type": "websocket.receive", "text": "a"}, {"type": "websocket.disconnect", "code": 1000}],
                           echoes=1)
        app = proxy(gone, recorded, alive, seed=seed)
        asyncio.run(asyncio.wait_for(app(scope("/chat/room"), client.receive, client.send), 5))
        tried_gone += len(gone.requests)
        assert client.sent[:2] == [{"type": "websocket.accept"}, {"type": "websocket.send", "text": "echo: a"}]
        assert recorded.sessions == [("chat", "v1", 101)] and len(alive.requests) == 1
    assert tried_gone > 0  # the retry was exercised


def test_a_handshake_whose_only_replica_died_before_answering_is_told_to_come_back_with_1013() -> None:
    recorded = Recorded()
    client = Client([])
    asyncio.run(asyncio.wait_for(proxy(EchoReplica(gone=True), recorded)(scope("/chat/room"), client.receive,
                                                                          client.send), 5))
    assert client.sent == [{"type": "websocket.accept"}, {"type": "websocket.close", "code": 1013}]
    assert recorded.sessions == [("chat", "v1", 502)]


def test_a_socket_to_no_route_is_refused_before_the_handshake() -> None:
    replica = EchoReplica()
    client = Client([])
    connect(replica, client, "/elsewhere")
    assert client.sent == [{"type": "websocket.close", "code": 1008}] and replica.requests == []


def counted(replica: EchoReplica | None, client: Client, path: str = "/chat/room") -> tuple[Recorded, ProxyApp]:
    """Run one session; what the recorder was told, and the app (for its rollout counts)."""
    recorded = Recorded()
    app = proxy(replica, recorded)
    asyncio.run(asyncio.wait_for(app(scope(path), client.receive, client.send), 5))
    return recorded, app


def test_an_accepted_session_is_one_101_request_with_its_accept_as_first_byte_and_no_latency() -> None:
    client = Client([{"type": "websocket.receive", "text": "a"}, {"type": "websocket.disconnect", "code": 1000}],
                    echoes=1)
    recorded, app = counted(EchoReplica(), client)
    assert recorded.sessions == [("chat", "v1", 101)] and recorded.first_bytes == [("chat", "v1")]
    assert recorded.requests == []  # a session's lifetime is no request duration
    stats = app.request_stats()["v1"]
    assert (stats.requests, stats.errors, sum(stats.buckets)) == (1, 0, 0)


def test_a_session_the_app_refuses_counts_as_the_403_the_client_got() -> None:
    client = Client([])
    recorded, app = counted(EchoReplica(refuses=True), client)
    assert client.sent == [{"type": "websocket.close", "code": 1000}]  # before the accept: uvicorn answers 403
    assert recorded.sessions == [("chat", "v1", 403)] and recorded.first_bytes == []
    assert app.request_stats()["v1"].errors == 0


@pytest.mark.parametrize(("replica", "code"), [(EchoReplica(dies=True), 502), (EchoReplica(raises=True), 500)])
def test_a_session_broken_by_its_replica_counts_as_the_5xx_of_a_broken_stream(replica: EchoReplica,
                                                                              code: int) -> None:
    client = Client([{"type": "websocket.receive", "text": "a"}])
    recorded, app = counted(replica, client)
    assert client.sent[-1] == {"type": "websocket.close", "code": 1011}
    assert recorded.sessions == [("chat", "v1", code)]
    stats = app.request_stats()["v1"]
    assert (stats.requests, stats.errors) == (1, 1)  # in the rollout's error share


def test_no_free_replica_accepts_and_closes_with_1013_counted_as_503() -> None:
    client = Client([])
    recorded, app = counted(None, client)
    assert client.sent == [{"type": "websocket.accept"}, {"type": "websocket.close", "code": 1013}]
    assert recorded.sessions == [("chat", "v1", 503)]
    assert (app.request_stats()["v1"].requests, app.request_stats()["v1"].errors) == (1, 1)


def test_a_socket_refused_before_any_endpoint_is_known_is_counted_by_no_one() -> None:
    recorded, app = counted(EchoReplica(), Client([]), "/elsewhere")
    assert recorded.sessions == [] and app.request_stats() == {}


def test_an_open_session_is_an_ongoing_request_until_it_ends_then_one_101_in_the_metrics() -> None:
    async def scenario() -> None:
        metrics = ProxyMetrics()
        replica = EchoReplica()
        app = proxy(replica, metrics)
        leave = asyncio.Event()
        client = Client([{"type": "websocket.receive", "text": "a"}], echoes=1)

        async def receive() -> Message:
            if not client.script:
                await leave.wait()
                return {"type": "websocket.disconnect", "code": 1000}
            return await client.receive()

        session = asyncio.ensure_future(app(scope("/chat/room"), receive, client.send))
        await asyncio.wait_for(client.echoed.wait(), 5)
        metrics.observe_load(app.backend_load())
        assert value(metrics, "gitops_backend_ongoing_requests", backend="v1") == 1
        assert value(metrics, "gitops_http_time_to_first_byte_seconds_count", endpoint="chat", backend="v1") == 1
        assert value(metrics, "gitops_http_requests_total", endpoint="chat", backend="v1", code="101") is None
        leave.set()
        await asyncio.wait_for(session, 5)
        metrics.observe_load(app.backend_load())
        assert value(metrics, "gitops_backend_ongoing_requests", backend="v1") == 0
        assert value(metrics, "gitops_http_requests_total", endpoint="chat", backend="v1", code="101") == 1
        assert value(metrics, "gitops_http_request_duration_seconds_count", endpoint="chat", backend="v1") is None

    asyncio.run(scenario())


@contextlib.asynccontextmanager
async def edge(app: ProxyApp) -> AsyncIterator[str]:
    """`app` behind the proxy's HTTP server on 127.0.0.1: its ws:// base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = Server(app, ProxySettings().edge, websockets=True)
    task = asyncio.ensure_future(server.serve([sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield f"ws://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        await server.shutdown(1.0)
        await task


def test_what_a_websocket_client_sees_is_what_the_session_is_counted_as() -> None:
    async def scenario() -> None:
        refused, busy = Recorded(), Recorded()
        async with edge(proxy(EchoReplica(refuses=True), refused)) as url:
            with pytest.raises(InvalidStatus) as status:
                await ws_connect(url + "/chat/room", open_timeout=5)
            assert status.value.response.status_code == 403
        async with edge(proxy(None, busy)) as url:
            async with ws_connect(url + "/chat/room", open_timeout=5) as websocket:
                with pytest.raises(ConnectionClosed) as closed:
                    await asyncio.wait_for(websocket.recv(), 5)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
        assert refused.sessions == [("chat", "v1", 403)] and busy.sessions == [("chat", "v1", 503)]

    asyncio.run(scenario())
