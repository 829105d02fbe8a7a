"""Carrying a WebSocket between its client and one replica for its lifetime.

Owns the WebSocket path through the proxy: route it like a GET (no route,
no route table yet, or a path refused by normalisation closes it before the
handshake, which uvicorn answers with 403), pick a backend by the endpoint's
weights, take a replica slot for the connection's lifetime, and pump both
directions: what the app sends (accept, messages, close with its code)
comes from the replica's streaming generator to the client; what the client
sends (messages, its disconnect with its close code) goes to that same
replica, one message at a time and in order. A replica that dies closes the
socket with 1011, unless it died before answering the handshake: then the
client has seen nothing and the handshake goes to one other replica (1013
when there is none); a client that leaves cancels the replica's generator once
the app had a moment to see the disconnect. A backend with no free replica
accepts the socket and closes it at once with 1013 (try again later): a close
code exists only after the handshake, and closed before it uvicorn would
answer 403, which says "refused", not "come back".

Also owned here: what a session counts as (`session_code`), reported once
when it ends to the recorder (`session_done`) and the rollout counts
(`record_session`), with the code the HTTP path gives the same outcome:
101 for a session the app accepted (whoever closed it, with any code), the
status the client got when the app refused the handshake (403 for a close
before accept, else its `websocket.http.response.start` status), 503 for no
free replica, 502 for a replica that died and 500 for an app that raised
(after the accept too, as a stream that broke after its first chunk), 499 for
a client that left before the app answered it. Refusals before an endpoint is
known (no route, no route table, a refused path: 403) are counted by no one,
as plain 404s are not. Its time to accept goes to the recorder as its time to
first byte (`first_byte`) when it is accepted; its lifetime is no request
duration.

A traced session's span (`proxy.observability.tracing`) and a sampled session's capture
record (`proxy.observability.capture`: its messages each way counted, the first ones kept)
end with it.

Not here: Ray (`proxy.shell.raycalls`), plain requests (`proxy.app`), the metrics
themselves (`proxy.observability.metrics`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

from proxy.pool.calling import ReplicaDiedError, StreamCaller
from proxy.pool.replicas import NoReplicaError, QueueFullError
from proxy.observability.request_stats import RequestCounter
from httpedge.asgi import Receive, Scope, Send
from proxy.routes.routing import Resolution, normalise_path, resolve
from proxy.routes.snapshot import Snapshot
from vocabulary.control.actor_apis import ReplicaHandle
from vocabulary.request_path.choosing import Random
from vocabulary.request_path.wire import WireRequest, with_root_path
from proxy.observability.redacting import Exchange, Flow

if TYPE_CHECKING:  # handed in by the app: this module does no I/O itself
    from proxy.observability.capture import CaptureWriter
    from proxy.observability.tracing import RequestTracing

__all__ = ["WebSocketCarrier", "SessionRecorder", "Session", "session_code", "INTERNAL_ERROR", "TRY_AGAIN_LATER"]

logger = logging.getLogger(__name__)


NORMAL = 1000
INTERNAL_ERROR = 1011  # RFC 6455 7.4.1: the server hit a condition it could not handle
TRY_AGAIN_LATER = 1013
# How long a gone client's app may take to see the disconnect before it is cancelled.
_DISCONNECT_GRACE_S = 1.0
# A handshake whose replica died before answering it (killed moments before
# the proxy learned) goes to one more replica: the client has seen nothing yet.
_HANDSHAKE_ATTEMPTS = 2
# Hop-by-hop for the handshake: the replica's app sees an ordinary WebSocket scope.
_HANDSHAKE_ONLY = frozenset({b"connection", b"upgrade", b"sec-websocket-key", b"sec-websocket-version",
                             b"sec-websocket-extensions"})

# The codes of a session's outcomes (see the module doc), as the HTTP path counts the same outcomes.
ACCEPTED = 101
REFUSED = 403  # what uvicorn answers a close before the accept
NO_REPLICA = 503
REPLICA_DIED = 502
APP_FAILED = 500
CLIENT_LEFT = 499


class SessionRecorder(Protocol):
    """Where a WebSocket session is reported (`proxy.observability.metrics.ProxyMetrics`, through `proxy.app.Recorder`)."""

    def session_done(self, endpoint: str, backend: str, code: int) -> None: ...

    def first_byte(self, endpoint: str, backend: str, seconds: float) -> None: ...


@dataclass(frozen=True)
class Session:
    """How a session with a replica went, as `_pump` saw it."""

    accepted: bool = False
    refused: int | None = None  # the handshake status the app answered instead of accepting
    died: bool = False
    failed: bool = False  # the app raised
    client_left: bool = False

    @property
    def died_unanswered(self) -> bool:
        """The replica died before answering the handshake: the client has seen nothing, so another may serve it."""
        return self.died and not self.accepted and self.refused is None and not self.client_left


def session_code(session: Session) -> int:
    """The code a session is counted with (see the module doc)."""
    if session.died:
        return REPLICA_DIED
    if session.failed:
        return APP_FAILED
    if session.accepted:
        return ACCEPTED
    if session.refused is not None:
        return session.refused
    # Gone before the app answered; an app that returned without answering is closed before the accept: 403.
    return CLIENT_LEFT if session.client_left else REFUSED


class WebSocketCarrier:
    def __init__(self, caller: StreamCaller, rng: Random, recorder: SessionRecorder,
                 counts: RequestCounter | None = None, tracing: RequestTracing | None = None,
                 capture: CaptureWriter | None = None) -> None:
        """`tracing`: a traced session's span lasts its lifetime (`proxy.observability.tracing`; None: off);
        `capture`: a sampled session's record (`proxy.observability.capture`: its handshake, code, messages each
        way counted, the first ones kept up to max_body_bytes; None: nothing is captured)."""
        self._tracing = tracing
        self._capture = capture
        self._caller = caller
        self._rng = rng
        self._recorder = recorder
        self._counts = counts if counts is not None else RequestCounter()

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
        started = time.perf_counter()
        served = snapshot.endpoints[route.endpoint]
        backend = served.pick(scope["headers"], self._rng)
        traced = None if self._tracing is None else self._tracing.begin(
            served.name, backend, served.trace_sample, "GET", path, scope["headers"], "proxy.websocket",
            served.rollout_step,
        )
        pool = snapshot.pools.get(backend)
        try:
            if pool is None:
                raise NoReplicaError(backend)
            slot = await pool.acquire()
        except (NoReplicaError, QueueFullError):
            await send({"type": "websocket.accept"})
            await send({"type": "websocket.close", "code": TRY_AGAIN_LATER})
            self._done(served.name, backend, NO_REPLICA)
            if traced is not None:
                traced.end(NO_REPLICA, 0, None)
            return
        headers = [(n, v) for n, v in scope["headers"] if n not in _HANDSHAKE_ONLY]
        if traced is not None:
            traced.replica = slot.replica_id
            headers = traced.carry(headers)
        request: WireRequest = ("GET", path, scope["query_string"], with_root_path(headers, route.prefix), b"")
        captured = None
        if served.capture is not None and self._capture is not None:
            captured = self._capture.draw(served.capture, served.name, backend, request, served.rollout_step)
            if captured is not None:
                limit = captured.redaction.max_body_bytes
                captured.kind, captured.replica, captured.client, captured.app = "websocket", slot.replica_id, \
                    Flow(limit), Flow(limit)

        def accepted() -> None:
            self._recorder.first_byte(served.name, backend, time.perf_counter() - started)

        for attempt in range(_HANDSHAKE_ATTEMPTS):
            try:
                session = await self._pump(slot.handle, request, receive, send, accepted, captured)
            finally:
                pool.release(slot)
            if session.died:
                pool.drop(slot)
                logger.warning("replica %s of %s died under a WebSocket", slot.replica_id, pool.backend)
            if not session.died_unanswered or attempt + 1 == _HANDSHAKE_ATTEMPTS:
                break
            retry = pool.try_acquire()  # a replica that died before answering (killed moments before): another
            if retry is None:
                break
            slot = retry
            if traced is not None:
                traced.replica = slot.replica_id
            if captured is not None:
                captured.replica = slot.replica_id
        if session.died_unanswered:  # and no other replica took it: come back later, as for no replica
            await send({"type": "websocket.accept"})
            await send({"type": "websocket.close", "code": TRY_AGAIN_LATER})
        self._done(served.name, backend, session_code(session))
        if traced is not None:
            traced.end(session_code(session), -1, pool.commit)
        if captured is not None and self._capture is not None:
            captured.status, captured.latency_s, captured.commit = session_code(session), \
                time.perf_counter() - started, pool.commit
            if traced is not None:
                captured.trace_id = f"{traced.span.get_span_context().trace_id:032x}"
            captured.answered = True
            self._capture.offer(captured)

    def _done(self, endpoint: str, backend: str, code: int) -> None:
        self._recorder.session_done(endpoint, backend, code)
        if code != CLIENT_LEFT:
            self._counts.record_session(backend, code, endpoint)

    async def _pump(self, handle: ReplicaHandle, request: WireRequest, receive: Receive, send: Send,
                    accepted: Callable[[], None], captured: Exchange | None = None) -> Session:
        """Both directions until either side ends; how the session went. `captured`:
        each message counted (and the first kept) for its capture record."""
        websocket_id = uuid.uuid4().hex
        closed = False
        answered = False  # the app accepted or refused the handshake
        refused: int | None = None

        async def downstream() -> None:
            nonlocal closed, answered, refused
            async for message in self._caller.open_websocket(handle, websocket_id, request):
                kind = message["type"]
                if not answered:
                    if kind == "websocket.http.response.start":
                        refused = int(message.get("status", REFUSED))
                    elif kind == "websocket.close":
                        refused = REFUSED
                await send(message)
                if captured is not None and captured.app is not None and kind == "websocket.send":
                    captured.app.add(_payload(message))
                if not answered and kind in ("websocket.accept", "websocket.close", "websocket.http.response.start"):
                    answered = True
                    if kind == "websocket.accept":
                        accepted()
                closed = closed or kind == "websocket.close" or (
                    kind == "websocket.http.response.body" and not message.get("more_body", False))

        async def upstream() -> None:
            while True:
                message = await receive()
                if message["type"] not in ("websocket.receive", "websocket.disconnect"):
                    continue
                if captured is not None and captured.client is not None and message["type"] == "websocket.receive":
                    captured.client.add(_payload(message))
                if not await self._caller.push(handle, websocket_id, message):
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
        died = isinstance(error, ReplicaDiedError)
        if not closed and not client_left and (answered or not died):
            # An app that returned without closing is closed normally (ASGI); one that died before
            # answering the handshake is the caller's to retry or close.
            await send({"type": "websocket.close", "code": NORMAL if error is None else INTERNAL_ERROR})
        return Session(accepted=answered and refused is None, refused=refused, died=died,
                       failed=error is not None and not died, client_left=client_left)


def _payload(message: Mapping[str, Any]) -> bytes:
    """A WebSocket message's data: its bytes, or its text as UTF-8."""
    data = message.get("bytes")
    return data if isinstance(data, bytes) else str(message.get("text") or "").encode()


def _failure(task: asyncio.Future[None]) -> BaseException | None:
    return None if task.cancelled() else task.exception()
