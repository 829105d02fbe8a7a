"""What the data-path tests share: the replica's apps, a stand-in for a Ray
actor handle, and a stand-in for the Ray transport that says which path
served (tests/component/test_data_socket.py, test_data_tcp.py,
test_data_socket_streams.py). A replica loads the apps by `APPS:<name>`."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from vocabulary.actor_apis import Remote, ReplicaAPI, ReplicaHandle
from vocabulary.wire import BatchItem, BatchOutcome, BatchResult, Reply, WireRequest

APPS = __name__


class App:
    """Echoes; /slow waits until cancelled (and says so); /boom raises; /big answers ?n bytes."""

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
        return Response(b"echo:" + await request.body())


class Batched:
    async def __call__(self, requests: list[Request]) -> list[str]:
        return [f"{len(requests)}:{(await request.body()).decode()}" for request in requests]


class FakeHandle(Remote[ReplicaAPI]):
    """Stands for a replica's typed handle: only its identity matters to the transport (it calls nothing)."""

    def __init__(self, name: str) -> None:
        super().__init__(actor=None)
        self.name = name

    def __repr__(self) -> str:
        return f"FakeHandle({self.name})"


class RecordingFallback:
    """The Ray transport's stand-in: answers 203 so a test sees which path served."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def at_once(self, handle: ReplicaHandle, request: WireRequest) -> None:
        return None

    async def one(self, handle: ReplicaHandle, request: WireRequest) -> Reply:
        self.calls.append("one")
        return (203, [], b"over ray")

    async def batch(self, handle: ReplicaHandle, items: list[BatchItem]) -> list[BatchResult]:
        self.calls.append("batch")
        return [(BatchOutcome.OK, (203, [], b"over ray"))] * len(items)

    async def together(self, handle: ReplicaHandle, items: list[BatchItem]) -> list[BatchResult]:
        self.calls.append("together")
        return [(BatchOutcome.OK, (203, [], b"over ray"))] * len(items)
