"""The request path's Ray calls: the only place it touches Ray.

`RayMethods` makes the three kinds of replica call — `handle_request` for
one request, `handle_coalesced` for many, `handle_batch` for a batched
handler's list — and maps Ray's error types to `proxy.pool.calling`'s. A
cancelled single call cancels the replica-side task (that is how an endpoint
timeout stops user code). Never blocks the event loop: results are awaited,
never fetched with `ray.get`.

A streaming answer's rest and a WebSocket's outbound messages come through
Ray streaming generators (`ObjectRefGenerator`, `RayStreams`) with
backpressure: a replica's generator runs at most
`GENERATOR_BACKPRESSURE_ITEMS` ahead of what the proxy passed on to its
client. Leaving one early cancels it (`ray.cancel`), which cancels the
generator's task on the replica.

`RayCaller` is the proxy's `proxy.pool.replica_calls.ReplicaCalls` wired with
these, and with `proxy.pool.socketcalls.DataConnections` given the node id and
the Ray call that asks a replica for its data address (the TCP secret
included: it travels only over Ray, the control plane).
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncGenerator, AsyncIterator, Awaitable, Callable, TypeVar, cast

import ray
from ray.exceptions import ActorUnschedulableError, RayActorError, RayTaskError

from proxy.pool.calling import HandlerError, ReplicaDiedError
from proxy.pool.replica_calls import ReplicaCalls
from proxy.pool.socketcalls import Address, DataConnections
from vocabulary.control.actor_apis import ReplicaAPI, ReplicaHandle
from vocabulary.request_path.wire import TimedRequest, CallResult, StreamStart, WireRequest, WireResponse

Y = TypeVar("Y")

__all__ = ["RayCaller", "RayMethods", "RayStreams"]


class RayMethods:
    """A `proxy.pool.coalescing.ReplicaMethods` over the replica's Ray methods."""

    async def one(self, handle: ReplicaHandle, request: WireRequest) -> WireResponse | StreamStart:
        ref = handle.call(ReplicaAPI.handle_request, request)
        try:
            return await ref
        except asyncio.CancelledError:
            ray.cancel(cast(ray.ObjectRef, ref))  # Remote.call's awaitable is Ray's ObjectRef
            raise
        except (RayActorError, ActorUnschedulableError) as error:
            raise ReplicaDiedError(str(error)) from None
        except RayTaskError as error:
            raise HandlerError(str(error)) from None

    async def coalesced(self, handle: ReplicaHandle, items: list[TimedRequest]) -> list[CallResult]:
        try:
            return await handle.call(ReplicaAPI.handle_coalesced, items)
        except (RayActorError, ActorUnschedulableError) as error:
            raise ReplicaDiedError(str(error)) from None

    async def batch(self, handle: ReplicaHandle, items: list[TimedRequest]) -> list[CallResult]:
        try:
            return await handle.call(ReplicaAPI.handle_batch, items)
        except (RayActorError, ActorUnschedulableError) as error:
            raise ReplicaDiedError(str(error)) from None


async def _generated(generator: AsyncIterator[Awaitable[Y]]) -> AsyncGenerator[Y, None]:
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
            ray.cancel(cast(ray.ObjectRef, generator))  # an ObjectRefGenerator: Ray cancels its task


async def _data_address(handle: ReplicaHandle, node: str) -> Address:
    """The replica's data address, asked for a proxy on `node` (another node's opens its TCP listener)."""
    return await handle.call(ReplicaAPI.data_address, node)


def _local_node() -> str:
    return ray.get_runtime_context().get_node_id()


# How many items a replica's streaming generator may have yielded ahead of
# what the proxy took over Ray: past it, Ray pauses the generator until the
# proxy takes the next, so a slow client holds the producer, not the object store.
GENERATOR_BACKPRESSURE_ITEMS = 16


class RayStreams:
    """A `StreamCaller` over the replica's Ray methods, with backpressure on both generators."""

    def __init__(self, backpressure_items: int = GENERATOR_BACKPRESSURE_ITEMS) -> None:
        self._options = {"_generator_backpressure_num_objects": backpressure_items}

    def stream(self, handle: ReplicaHandle, start: StreamStart) -> AsyncGenerator[bytes, None]:
        return _generated(handle.stream_with(self._options, ReplicaAPI.stream, start.stream_id))

    def discard(self, handle: ReplicaHandle, start: StreamStart) -> None:
        handle.call(ReplicaAPI.close_stream, start.stream_id)

    def open_websocket(
        self, handle: ReplicaHandle, websocket_id: str, request: WireRequest
    ) -> AsyncGenerator[dict[str, Any], None]:
        return _generated(handle.stream_with(self._options, ReplicaAPI.websocket, websocket_id, request))

    async def push(self, handle: ReplicaHandle, websocket_id: str, message: dict[str, Any]) -> bool:
        try:
            return bool(await handle.call(ReplicaAPI.websocket_message, websocket_id, message))
        except (RayActorError, ActorUnschedulableError) as error:
            raise ReplicaDiedError(str(error)) from None


class RayCaller(ReplicaCalls):
    """`ReplicaCalls` with Ray's methods and streams, and data connections unless told not to."""

    def __init__(
        self,
        max_calls_per_replica: int,
        coalesce_window_s: float,
        observe_batch: Callable[[str, int], None] | None = None,
        data_connections: bool = True,
        local_node: Callable[[], str] = _local_node,
    ) -> None:
        """`data_connections=False`: every request is a Ray call, even to a replica
        on this node. `local_node` names the proxy's node (tests: another one)."""
        connections = (
            DataConnections(local_node, lambda handle: _data_address(handle, local_node())) if data_connections else None
        )
        super().__init__(
            RayMethods(), max_calls_per_replica, coalesce_window_s, observe_batch, RayStreams(), connections
        )
