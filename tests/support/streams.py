"""Streaming replicas and callers, and a client that reads a stream, for the proxy's streaming tests.

Moved out of tests/component/test_proxy_streaming.py, whose tests use them too."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

from proxy.app import ProxyApp
from proxy.pool.calling import Batching, ReplicaDiedError
from vocabulary.control.actor_apis import ReplicaHandle
from vocabulary.request_path.wire import Reply, StreamStart, WireRequest

SSE = [(b"content-type", b"text/event-stream")]

class StreamingReplica:
    """Answers every call with a stream: `first`, then `rest` with `gap_s` before each chunk."""

    def __init__(self, rest: list[bytes], gap_s: float = 0.0, dies_after: int | None = None) -> None:
        self.rest, self.gap_s, self.dies_after = rest, gap_s, dies_after
        self.closed_early = 0
        self.discarded: list[str] = []
        self.calls = 0

class StreamingCaller:
    async def call(self, handle: ReplicaHandle, request: WireRequest, timeout_s: float,
                   batching: Batching | None = None) -> Reply:
        handle.actor.calls += 1
        return StreamStart(200, SSE, b"first;", f"s{handle.actor.calls}")

    async def stream(self, handle: ReplicaHandle, start: StreamStart) -> AsyncIterator[bytes]:
        finished = False
        try:
            for n, chunk in enumerate(handle.actor.rest):
                if handle.actor.dies_after is not None and n == handle.actor.dies_after:
                    raise ReplicaDiedError("gone")
                await asyncio.sleep(handle.actor.gap_s)
                yield chunk
            finished = True
        finally:
            handle.actor.closed_early += not finished

    def discard(self, handle: ReplicaHandle, start: StreamStart) -> None:
        handle.actor.discarded.append(start.stream_id)

class Client:
    """One request's ASGI side: what the app sent, and a disconnect the test can trigger."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.leave = asyncio.Event()
        self._asked = 0

    async def receive(self) -> dict[str, Any]:
        self._asked += 1
        if self._asked == 1:
            return {"type": "http.request", "body": b"", "more_body": False}
        await self.leave.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")

    def complete(self) -> bool:
        return any(m["type"] == "http.response.body" and not m.get("more_body") for m in self.sent)

def scope(path: str = "/e") -> dict[str, Any]:
    return {"type": "http", "method": "GET", "path": path, "raw_path": path.encode(), "query_string": b"",
            "headers": [], "http_version": "1.1"}

async def request(app: ProxyApp, client: Client) -> None:
    await app(scope(), client.receive, client.send)
