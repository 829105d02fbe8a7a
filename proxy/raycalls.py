"""`ReplicaCaller` over Ray actor calls: the only place the request path touches Ray.

`RayTransport` makes the three kinds of replica call — `handle_request` for
one request, `handle_batch` for many, `handle_together` for a batched
handler's list — and maps Ray's error types to
`proxy.calling`'s; `RayCaller` puts `proxy.coalescing` in front so that,
under load, requests queued for one replica share one Ray call. A cancelled
single call cancels the replica-side task (that is how an endpoint timeout
stops user code). Never blocks the event loop: results are awaited, never
fetched with `ray.get`. Behind the coalescer, `proxy.socketcalls` sends a
replica its requests as frames instead — over a Unix socket on the proxy's
own node, over authenticated TCP from another — with `RayTransport` as the
fallback; this module gives it the node id and the Ray call that asks a
replica for its data address (the TCP secret included: it travels only
over Ray, the control plane).

A streaming answer's rest and a WebSocket's outbound messages come through
Ray streaming generators (`ObjectRefGenerator`, `RayStreams`); leaving one
early cancels it (`ray.cancel`), which cancels the generator's task on the
replica. To a replica with an open data connection they travel as
frames instead (`SocketTransport` is the `StreamCaller` then, with
`RayStreams` as its fallback).
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine, TypeVar, cast

import ray
from ray import ObjectRef, ObjectRefGenerator
from ray.exceptions import ActorUnschedulableError, RayActorError, RayTaskError

from proxy.calling import Batching, HandlerError, ReplicaDiedError, StreamCaller
from proxy.coalescing import Coalescer, Transport
from proxy.socketcalls import Address, SocketTransport
from vocabulary.actor_apis import ReplicaAPI, ReplicaHandle
from vocabulary.wire import BatchItem, BatchResult, StreamStart, WireRequest, WireResponse

__all__ = ["RayCaller", "RayTransport", "RayStreams"]

T = TypeVar("T")


def _object_ref(ref: Awaitable[T]) -> ObjectRef[T]:
    """What `Remote.call` returns, as Ray's type: it is Ray's ObjectRef."""
    return cast("ObjectRef[T]", ref)


class RayTransport:
    def at_once(self, handle: ReplicaHandle, request: WireRequest) -> None:
        return None  # a Ray call costs far more than a request: coalesce under load

    async def one(self, handle: ReplicaHandle, request: WireRequest) -> WireResponse | StreamStart:
        ref = handle.call(ReplicaAPI.handle_request, request)
        try:
            return await ref
        except asyncio.CancelledError:
            ray.cancel(_object_ref(ref))
            raise
        except (RayActorError, ActorUnschedulableError) as error:
            raise ReplicaDiedError(str(error)) from None
        except RayTaskError as error:
            raise HandlerError(str(error)) from None

    async def batch(self, handle: ReplicaHandle, items: list[BatchItem]) -> list[BatchResult]:
        try:
            return await handle.call(ReplicaAPI.handle_batch, items)
        except (RayActorError, ActorUnschedulableError) as error:
            raise ReplicaDiedError(str(error)) from None

    async def together(self, handle: ReplicaHandle, items: list[BatchItem]) -> list[BatchResult]:
        try:
            return await handle.call(ReplicaAPI.handle_together, items)
        except (RayActorError, ActorUnschedulableError) as error:
            raise ReplicaDiedError(str(error)) from None


async def _generated(generator: AsyncIterator[Awaitable[T]]) -> AsyncGenerator[T, None]:
    """The values of a Ray streaming generator; leaving early cancels it on the replica."""
    finished = False
    try:
        async for ref in generator:
            yield await ref
        finished = True
    except (RayActorError, ActorUnschedulableError) as error:
        finished = True
        raise ReplicaDiedError(str(error)) from None
    except RayTaskError as error:
        finished = True
        raise HandlerError(str(error)) from None
    finally:
        if not finished:
            ray.cancel(cast(ObjectRefGenerator, generator))  # what `Remote.stream` returns


async def _data_address(handle: ReplicaHandle, node: str) -> Address:
    """The replica's data address, asked for a proxy on `node` (another node's opens its TCP listener)."""
    return await handle.call(ReplicaAPI.data_address, node)


def _local_node() -> str:
    return ray.get_runtime_context().get_node_id()


class RayStreams:
    """A `StreamCaller` over the replica's Ray methods."""

    def stream(self, handle: ReplicaHandle, start: StreamStart) -> AsyncGenerator[bytes, None]:
        return _generated(handle.stream(ReplicaAPI.stream, start.stream_id))

    def discard(self, handle: ReplicaHandle, start: StreamStart) -> None:
        handle.call(ReplicaAPI.close_stream, start.stream_id)

    def open_socket(self, handle: ReplicaHandle, socket_id: str, request: WireRequest) -> AsyncGenerator[dict[str, Any], None]:
        return _generated(handle.stream(ReplicaAPI.socket, socket_id, request))

    async def push(self, handle: ReplicaHandle, socket_id: str, message: dict[str, Any]) -> bool:
        try:
            return bool(await handle.call(ReplicaAPI.socket_message, socket_id, message))
        except (RayActorError, ActorUnschedulableError) as error:
            raise ReplicaDiedError(str(error)) from None


class RayCaller:
    def __init__(
        self,
        max_calls_per_replica: int,
        coalesce_window_s: float,
        observe_batch: Callable[[str, int], None] | None = None,
        data_socket: bool = True,
        local_node: Callable[[], str] = _local_node,
    ) -> None:
        """`data_socket=False`: every request is a Ray call, even to a replica
        on this node. `local_node` names the proxy's node (tests: another one)."""
        transport: Transport = RayTransport()
        self._streams: StreamCaller = RayStreams()
        self.frames: SocketTransport | None = None
        if data_socket:
            transport = self._streams = self.frames = SocketTransport(
                transport, local_node, lambda handle: _data_address(handle, local_node()), streams=self._streams
            )
        self._coalescer = Coalescer(transport, max_calls_per_replica, coalesce_window_s, observe_batch)

    def call(
        self, handle: ReplicaHandle, request: WireRequest, timeout_s: float, batching: Batching | None = None
    ) -> Coroutine[Any, Any, WireResponse | StreamStart]:
        # The coalescer's own coroutine, not one wrapped around it: one layer less per request.
        return self._coalescer.call(handle, request, timeout_s, batching)

    def stream(self, handle: ReplicaHandle, start: StreamStart) -> AsyncGenerator[bytes, None]:
        return self._streams.stream(handle, start)

    def discard(self, handle: ReplicaHandle, start: StreamStart) -> None:
        self._streams.discard(handle, start)

    def open_socket(self, handle: ReplicaHandle, socket_id: str, request: WireRequest) -> AsyncGenerator[dict[str, Any], None]:
        return self._streams.open_socket(handle, socket_id, request)

    async def push(self, handle: ReplicaHandle, socket_id: str, message: dict[str, Any]) -> bool:
        return await self._streams.push(handle, socket_id, message)
