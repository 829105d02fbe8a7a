"""Carrying a WebSocket between its client and one replica for its lifetime.

Owns the WebSocket path through the proxy: route it like a GET (no route,
no route table yet, or a path refused by normalisation closes it before the
handshake, which uvicorn answers with 403), pick a backend by the endpoint's
weights, take a replica slot for the connection's lifetime, and pump both
directions: what the app sends (accept, messages, close with its code)
comes from the replica's streaming generator to the client; what the client
sends (messages, its disconnect with its close code) goes to that same
replica, one message at a time and in order. A replica that dies closes the
socket with 1011; a client that leaves cancels the replica's generator once
the app had a moment to see the disconnect.

Not here: Ray (`proxy.raycalls`), plain requests (`proxy.app`).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any, Awaitable, Callable

from proxy.calling import ReplicaDiedError, StreamCaller
from proxy.replicas import NoReplicaError, QueueFullError
from proxy.routing import Resolution, normalise_path, resolve
from proxy.snapshot import Snapshot
from vocabulary.choosing import Random
from vocabulary.wire import WireRequest, with_root_path

__all__ = ["SocketCarrier", "INTERNAL_ERROR", "TRY_AGAIN_LATER"]

logger = logging.getLogger(__name__)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

NORMAL = 1000
INTERNAL_ERROR = 1011  # RFC 6455 7.4.1: the server hit a condition it could not handle
TRY_AGAIN_LATER = 1013
# How long a gone client's app may take to see the disconnect before it is cancelled.
_DISCONNECT_GRACE_S = 1.0
# Hop-by-hop for the handshake: the replica's app sees an ordinary WebSocket scope.
_HANDSHAKE_ONLY = frozenset({b"connection", b"upgrade", b"sec-websocket-key", b"sec-websocket-version",
                             b"sec-websocket-extensions"})


class SocketCarrier:
    def __init__(self, caller: StreamCaller, rng: Random) -> None:
        self._caller = caller
        self._rng = rng

    async def carry(self, snapshot: Snapshot | None, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one WebSocket connection (`snapshot` None: no route table yet)."""
        path = normalise_path(scope.get("raw_path") or scope["path"].encode())
        route = None
        if snapshot is not None and path is not None and not path.startswith("/-/"):
            resolution, route = resolve(snapshot.routes, path, "GET")
            route = route if resolution is Resolution.MATCHED else None
        if snapshot is None or route is None or path is None:
            await send({"type": "websocket.close", "code": 1008})
            return
        if (await receive())["type"] != "websocket.connect":
            return
        served = snapshot.endpoints[route.endpoint]
        pool = snapshot.pools.get(served.pick(scope["headers"], self._rng))
        if pool is None:
            await send({"type": "websocket.close", "code": TRY_AGAIN_LATER})
            return
        try:
            slot = await pool.acquire()
        except (NoReplicaError, QueueFullError):
            await send({"type": "websocket.close", "code": TRY_AGAIN_LATER})
            return
        headers = [(n, v) for n, v in scope["headers"] if n not in _HANDSHAKE_ONLY]
        request: WireRequest = ("GET", path, scope["query_string"], with_root_path(headers, route.prefix), b"")
        try:
            died = await self._pump(slot.handle, request, receive, send)
        finally:
            pool.release(slot)
        if died:
            pool.drop(slot)
            logger.warning("replica %s of %s died under a WebSocket", slot.replica_id, pool.backend)

    async def _pump(self, handle: Any, request: WireRequest, receive: Receive, send: Send) -> bool:
        """Both directions until either side ends; True when the replica died."""
        socket_id = uuid.uuid4().hex
        closed = False

        async def downstream() -> None:
            nonlocal closed
            async for message in self._caller.open_socket(handle, socket_id, request):
                await send(message)
                closed = closed or message["type"] == "websocket.close"

        async def upstream() -> None:
            while True:
                message = await receive()
                if message["type"] not in ("websocket.receive", "websocket.disconnect"):
                    continue
                if not await self._caller.push(handle, socket_id, message):
                    return
                if message["type"] == "websocket.disconnect":
                    return

        down = asyncio.ensure_future(downstream())
        up = asyncio.ensure_future(upstream())
        try:
            await asyncio.wait((down, up), return_when=asyncio.FIRST_COMPLETED)
            if up.done() and not down.done():
                # The client left: let the app see its disconnect, then stop it.
                await asyncio.wait((down,), timeout=_DISCONNECT_GRACE_S)
        finally:
            for task in (down, up):
                task.cancel()
            await asyncio.gather(down, up, return_exceptions=True)
        client_left = up.done() and not up.cancelled() and up.exception() is None
        error = _failure(down) or _failure(up)
        if error is not None and not isinstance(error, ReplicaDiedError):
            logger.error("WebSocket app raised:\n%s", error)
        if not closed and not client_left:
            # An app that returned without closing is closed normally (ASGI).
            await send({"type": "websocket.close", "code": NORMAL if error is None else INTERNAL_ERROR})
        return isinstance(error, ReplicaDiedError)


def _failure(task: asyncio.Future[None]) -> BaseException | None:
    return None if task.cancelled() else task.exception()
