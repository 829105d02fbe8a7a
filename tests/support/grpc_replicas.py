"""A caller for the proxy app's gRPC tests (`tests.support.proxy_app`) that runs each call through the replica
host's gRPC dispatch (`replica.calling.grpc_calls`) in-process, streamed rests held as the Ray caller holds them,
and streaming-request calls carried in a WebSocket session as the replica host carries them.

Moved out of tests/component/test_grpc_ingress.py: the v2 gRPC tests (tests/component/test_v2_grpc.py) use it too."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncGenerator, AsyncIterator

import grpc.aio

from proxy.grpc_ingress import serve_grpc
from proxy.pool.calling import Batching, HandlerError
from proxy.settings import GrpcLimits
from replica.calling.asgi import BodyStream, WebSocketSession
from replica.calling.grpc_calls import GrpcMethods
from tests.support.proxy_app import FakeReplica, Proxy
from vocabulary.control.actor_apis import ReplicaHandle
from vocabulary.request_path.wire import Reply, StreamStart, WireRequest

__all__ = ["GrpcCaller", "run_grpc"]


class GrpcCaller:
    """Runs each call through `replica.calling.grpc_calls` as the replica host does; holds streamed rests."""

    def __init__(self) -> None:
        self.held: dict[str, AsyncGenerator[bytes, None]] = {}
        self.sessions: dict[str, WebSocketSession] = {}

    async def call(self, handle: ReplicaHandle, request: WireRequest, timeout_s: float,
                   batching: Batching | None = None) -> Reply:
        replica: FakeReplica = handle.actor
        replica.seen.append(request)
        try:
            reply = await replica.handler(request)
        except Exception as error:  # noqa: BLE001 — as the Ray caller says it: the user's code raised
            raise HandlerError(repr(error)) from None
        if isinstance(reply, BodyStream):
            stream_id = f"s{len(self.held)}"
            self.held[stream_id] = reply.rest
            return StreamStart(reply.status, reply.headers, reply.first_chunk, stream_id)
        return reply

    async def stream(self, handle: ReplicaHandle, start: StreamStart) -> AsyncIterator[bytes]:
        rest = self.held.pop(start.stream_id)
        try:
            async for chunk in rest:
                yield chunk
        finally:
            await rest.aclose()

    def discard(self, handle: ReplicaHandle, start: StreamStart) -> None:
        self.held.pop(start.stream_id, None)

    async def open_websocket(
        self, handle: ReplicaHandle, websocket_id: str, request: WireRequest
    ) -> AsyncGenerator[dict[str, Any], None]:
        """A call whose requests stream: the session the replica host opens for it, to the gRPC methods'
        session app (`GrpcMethods.session`) of the replica's handler."""
        replica: FakeReplica = handle.actor
        replica.seen.append(request)
        methods: GrpcMethods = replica.handler.__self__  # type: ignore[attr-defined]  # GrpcMethods(...).call
        session = self.sessions[websocket_id] = WebSocketSession(methods.session, request)
        try:
            async for message in session.outbound():
                yield message
        except Exception as error:  # noqa: BLE001 — as the Ray caller says it: the user's code raised
            raise HandlerError(repr(error)) from None
        finally:
            del self.sessions[websocket_id]

    async def push(self, handle: ReplicaHandle, websocket_id: str, message: dict[str, Any]) -> bool:
        session = self.sessions.get(websocket_id)
        if session is None:
            return False
        await session.push(message)
        return True


def run_grpc(proxy: Proxy, test: Any) -> None:
    """`test(channel)` against `proxy`'s app served on a gRPC port of its own on 127.0.0.1."""
    async def serving() -> None:
        server, port = await serve_grpc(proxy.app, "127.0.0.1", 0, GrpcLimits(), shared=False)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                await test(channel)
        finally:
            await server.stop(None)

    asyncio.run(serving())
