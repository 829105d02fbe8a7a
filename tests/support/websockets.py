"""WebSocket replicas and callers, and a client, for the proxy's WebSocket tests.

Moved out of tests/component/test_proxy_websockets.py, whose tests use them too."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncGenerator

from proxy.pool.calling import HandlerError, ReplicaDiedError
from vocabulary.control.actor_apis import ReplicaHandle
from vocabulary.request_path.wire import WireRequest

Message = dict[str, Any]

class EchoReplica:
    """Accepts, then echoes each client message until the client leaves (or it dies)."""

    def __init__(self, dies: bool = False, refuses: bool = False, raises: bool = False,
                 gone: bool = False) -> None:
        self.dies = dies
        self.gone = gone  # dead before it answers the handshake (killed moments before the proxy learned)
        self.refuses = refuses
        self.raises = raises
        self.pushed: list[Message] = []
        self.requests: list[WireRequest] = []
        self.inbox: asyncio.Queue[Message] = asyncio.Queue()

class SocketCaller:
    async def open_websocket(self, handle: ReplicaHandle, websocket_id: str,
                          request: WireRequest) -> AsyncGenerator[Message, None]:
        handle.actor.requests.append(request)
        if handle.actor.gone:
            raise ReplicaDiedError("gone before the handshake")
        if handle.actor.refuses:
            yield {"type": "websocket.close", "code": 1000}
            return
        yield {"type": "websocket.accept"}
        if handle.actor.dies:
            raise ReplicaDiedError("gone")
        if handle.actor.raises:
            raise HandlerError("boom")
        while True:
            message = await handle.actor.inbox.get()
            if message["type"] == "websocket.disconnect":
                return
            yield {"type": "websocket.send", "text": "echo: " + message["text"]}

    async def push(self, handle: ReplicaHandle, websocket_id: str, message: Message) -> bool:
        handle.actor.pushed.append(message)
        handle.actor.inbox.put_nowait(message)
        return True

class Recorded:
    """A recorder that keeps what it was told."""

    def __init__(self) -> None:
        self.sessions: list[tuple[str, str, int]] = []
        self.first_bytes: list[tuple[str, str]] = []
        self.requests: list[tuple[str, str, int]] = []

    def session_done(self, endpoint: str, backend: str, code: int) -> None:
        self.sessions.append((endpoint, backend, code))

    def first_byte(self, endpoint: str, backend: str, seconds: float) -> None:
        assert seconds >= 0
        self.first_bytes.append((endpoint, backend))

    def request_done(self, endpoint: str, backend: str, code: int, duration_s: float) -> None:
        self.requests.append((endpoint, backend, code))

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
