"""WebSockets through the proxy's ASGI app, in-process with a fake replica
(no Ray, no sockets): what reaches the replica from the client, in order,
and how the client's connection ends."""

from __future__ import annotations

import asyncio
import random
from typing import Any, AsyncGenerator

from proxy.app import ProxyApp
from proxy.calling import ReplicaDiedError
from proxy.settings import ProxySettings
from proxy.subscriptions import Subscriptions
from vocabulary.configs import EndpointConfig, ReplicaInfo, ReplicaSet, RouteEntry, RouteTable
from vocabulary.wire import WireRequest

Message = dict[str, Any]


class EchoReplica:
    """Accepts, then echoes each client message until the client leaves (or it dies)."""

    def __init__(self, dies: bool = False) -> None:
        self.dies = dies
        self.pushed: list[Message] = []
        self.requests: list[WireRequest] = []
        self.inbox: asyncio.Queue[Message] = asyncio.Queue()


class SocketCaller:
    async def open_socket(self, handle: EchoReplica, socket_id: str,
                          request: WireRequest) -> AsyncGenerator[Message, None]:
        handle.requests.append(request)
        yield {"type": "websocket.accept"}
        if handle.dies:
            raise ReplicaDiedError("gone")
        while True:
            message = await handle.inbox.get()
            if message["type"] == "websocket.disconnect":
                return
            yield {"type": "websocket.send", "text": "echo: " + message["text"]}

    async def push(self, handle: EchoReplica, socket_id: str, message: Message) -> bool:
        handle.pushed.append(message)
        handle.inbox.put_nowait(message)
        return True


def proxy(replica: EchoReplica) -> ProxyApp:
    rng = random.Random(0)
    app = ProxyApp(SocketCaller(), ProxySettings(), rng)  # type: ignore[arg-type]
    info = ReplicaInfo(replica_id="r1", actor_name="r1", handle=replica)
    app.install(Subscriptions(ProxySettings(), rng).apply({
        "routes": (1, RouteTable(entries=(RouteEntry(route="/chat", methods=("GET",), endpoint="chat"),))),
        "endpoint:chat": (2, EndpointConfig(name="chat", route="/chat", traffic={"v1": 1.0})),
        "replicas:v1": (3, ReplicaSet(backend="v1", max_concurrent_queries=10, replicas=(info,))),
    }))
    return app


class Client:
    """Sends `script` after connecting; leaves (a disconnect in the script) only
    once `echoes` messages came back; stays connected when the script is done."""

    def __init__(self, script: list[Message], echoes: int = 0) -> None:
        self.script = [{"type": "websocket.connect"}, *script]
        self.echoes = echoes
        self.sent: list[Message] = []
        self.echoed = asyncio.Event()
        if echoes == 0:
            self.echoed.set()

    async def receive(self) -> Message:
        if not self.script:
            return await asyncio.get_running_loop().create_future()  # never leaves
        if self.script[0]["type"] == "websocket.disconnect":
            await self.echoed.wait()
        return self.script.pop(0)

    async def send(self, message: Message) -> None:
        self.sent.append(message)
        if sum(m["type"] == "websocket.send" for m in self.sent) == self.echoes:
            self.echoed.set()


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


def test_a_socket_to_no_route_is_refused_before_the_handshake() -> None:
    replica = EchoReplica()
    client = Client([])
    connect(replica, client, "/elsewhere")
    assert client.sent == [{"type": "websocket.close", "code": 1008}] and replica.requests == []
