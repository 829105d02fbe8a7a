"""The one call stack to replicas: frames when connected, else coalesced Ray calls.

`ReplicaCalls` is the proxy's `Caller` (`proxy.pool.calling`). For every call it
decides itself, in one place, how the replica is reached:

- a replica with an open data connection (`proxy.pool.socketcalls`) gets each
  request as its own frame at once (a call there costs about what a
  request does: holding one back for a coalesced call would only add
  latency), and its streams, WebSockets and batched lists as frames too;
- any other replica — no connection yet, none to be had, a lost one within
  its back-off — gets its requests through its `ReplicaMethods` (Ray's), coalesced
  under load (`proxy.pool.coalescing`), and its streams and WebSockets over the
  `StreamCaller` (Ray's);
- a request too large for a frame goes through its `ReplicaMethods` uncoalesced.

A batched backend's requests are gathered into lists first
(`proxy.pool.gathering`), whichever way the list then goes. Both ways are
injected (`proxy.shell.raycalls.RayCaller` wires Ray's; tests pass fakes). No Ray here.
"""

from __future__ import annotations

from typing import Any, AsyncGenerator, Callable, Coroutine

from proxy.pool.calling import Batching, ReplicaDiedError, StreamCaller
from proxy.pool.coalescing import Coalescer, ReplicaMethods
from proxy.pool.gathering import Gatherer
from proxy.pool.socketcalls import DataConnections, ReplicaConnection
from vocabulary.control.actor_apis import ReplicaHandle
from vocabulary.request_path.wire import TimedRequest, CallResult, Reply, StreamStart, WireRequest

__all__ = ["ReplicaCalls"]


class _NoStreams:
    """Without a stream caller, streams need the replica's data connection."""

    def _none(self) -> ReplicaDiedError:
        return ReplicaDiedError("no data connection to this replica, and no other way to stream")

    def stream(self, handle: ReplicaHandle, start: StreamStart) -> AsyncGenerator[bytes, None]:
        raise self._none()

    def discard(self, handle: ReplicaHandle, start: StreamStart) -> None:
        pass

    def open_websocket(
        self, handle: ReplicaHandle, websocket_id: str, request: WireRequest
    ) -> AsyncGenerator[dict[str, Any], None]:
        raise self._none()

    async def push(self, handle: ReplicaHandle, websocket_id: str, message: dict[str, Any]) -> bool:
        raise self._none()


class ReplicaCalls:
    """A `Caller`: frames to a replica with a data connection, `methods` and `streams` (Ray's) to any other."""

    def __init__(
        self,
        methods: ReplicaMethods,
        max_calls_per_replica: int,
        coalesce_window_s: float,
        observe_batch: Callable[[str, int], None] | None = None,
        streams: StreamCaller | None = None,
        connections: DataConnections | None = None,
    ) -> None:
        """`observe_batch(backend, size)` is told each list a batched handler
        receives; without `connections`, every call goes over `methods`."""
        self._methods = methods
        self._streams: StreamCaller = streams if streams is not None else _NoStreams()
        self.connections = connections
        self._coalescer = Coalescer(methods, max_calls_per_replica, coalesce_window_s)
        self._gatherer = Gatherer(self.batch, observe_batch)

    def _connection(self, handle: ReplicaHandle) -> ReplicaConnection | None:
        connections = self.connections
        return None if connections is None else connections.connection(handle)

    def call(
        self, handle: ReplicaHandle, request: WireRequest, timeout_s: float, batching: Batching | None = None
    ) -> Coroutine[Any, Any, Reply]:
        # The coroutine of the layer that makes the call, not one wrapped around it: one layer less per request.
        if batching is not None:
            return self._gatherer.call(handle, request, timeout_s, batching)
        connection = self._connection(handle)
        if connection is None:
            return self._coalescer.call(handle, request, timeout_s)
        sent = connection.request(request)
        return sent if sent is not None else self._methods.one(handle, request)

    async def batch(self, handle: ReplicaHandle, items: list[TimedRequest]) -> list[CallResult]:
        """One call of a batched handler with `items`."""
        connection = self._connection(handle)
        if connection is not None:
            sent = connection.batch(items)
            if sent is not None:
                return await sent
        return await self._methods.batch(handle, items)

    # --- StreamCaller ---------------------------------------------------------

    def stream(self, handle: ReplicaHandle, start: StreamStart) -> AsyncGenerator[bytes, None]:
        connection = self._connection(handle)
        items = None if connection is None else connection.stream(start)
        return items if items is not None else self._streams.stream(handle, start)

    def discard(self, handle: ReplicaHandle, start: StreamStart) -> None:
        connection = self._connection(handle)
        if connection is None or not connection.discard(start):
            self._streams.discard(handle, start)

    def open_websocket(
        self, handle: ReplicaHandle, websocket_id: str, request: WireRequest
    ) -> AsyncGenerator[dict[str, Any], None]:
        connection = self._connection(handle)
        items = None if connection is None else connection.open_websocket(websocket_id, request)
        return items if items is not None else self._streams.open_websocket(handle, websocket_id, request)

    async def push(self, handle: ReplicaHandle, websocket_id: str, message: dict[str, Any]) -> bool:
        connection = self._connection(handle)
        sent = None if connection is None else connection.push(websocket_id, message)
        return await (sent if sent is not None else self._streams.push(handle, websocket_id, message))
