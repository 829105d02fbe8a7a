"""What the data-path tests share: the replica's apps, a stand-in for a Ray
actor handle, a stand-in for the Ray transport that says which path
served, and the proxy's call stack over real data connections with that
stand-in as "Ray" (tests/component/test_data_socket.py, test_data_tcp.py,
test_data_socket_streams.py). A replica loads the apps by `APPS:<name>`."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from proxy.pool.calling import StreamCaller
from proxy.pool.replica_calls import ReplicaCalls
from proxy.pool.socketcalls import DataConnections
from vocabulary.control.actor_apis import ReplicaHandle
from vocabulary.request_path.wire import CallOutcome, CallResult, Reply, TimedRequest, WireRequest

APPS = __name__


class App:
    """Echoes; /slow waits until cancelled (and says so); /boom raises; /big answers ?n bytes;
    /size answers the body's length and a checksum of it, not the body."""

    started: asyncio.Event | None = None
    cancelled: asyncio.Event | None = None

    async def __call__(self, request: Request) -> Response:
        path = request.url.path
        if path == "/stream":
            async def chunks() -> Any:
                for n in range(3):
                    yield f"chunk {n};".encode()

            return StreamingResponse(chunks())
        if path == "/slow":
            assert App.started is not None and App.cancelled is not None
            App.started.set()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                App.cancelled.set()
                raise
        if path == "/boom":
            raise ValueError("the model exploded")
        if path == "/big":
            return Response(b"z" * int(request.query_params["n"]))
        if path == "/size":
            body = await request.body()
            return Response(f"{len(body)} {sum(body[::65536])}".encode())
        return Response(b"echo:" + await request.body())


class Batched:
    async def __call__(self, requests: list[Request]) -> list[str]:
        return [f"{len(requests)}:{(await request.body()).decode()}" for request in requests]


class FakeHandle:
    """Stands for a Ray actor handle: only its identity matters to the transport."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"FakeHandle({self.name})"


class RecordingFallback:
    """The Ray transport's stand-in: answers 203 so a test sees which path served."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def one(self, handle: ReplicaHandle, request: WireRequest) -> Reply:
        self.calls.append("one")
        return (203, [], b"over ray")

    async def coalesced(self, handle: ReplicaHandle, items: list[TimedRequest]) -> list[CallResult]:
        self.calls.append("coalesced")
        return [(CallOutcome.OK, (203, [], b"over ray"))] * len(items)

    async def batch(self, handle: ReplicaHandle, items: list[TimedRequest]) -> list[CallResult]:
        self.calls.append("batch")
        return [(CallOutcome.OK, (203, [], b"over ray"))] * len(items)


class Calls(ReplicaCalls):
    """The proxy's call stack over `connections`, `fallback` standing for Ray
    (never coalescing here: every Ray call carries one request)."""

    def __init__(self, fallback: RecordingFallback, connections: DataConnections, streams: StreamCaller | None = None) -> None:
        super().__init__(fallback, 1000, 0.001, streams=streams, connections=connections)
        self.connections: DataConnections = connections

    def one(self, handle: ReplicaHandle, request: WireRequest) -> Awaitable[Reply]:
        """`request`'s reply, within a minute."""
        return self.call(handle, request, 60.0)
