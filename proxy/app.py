"""The proxy's ASGI application: one request in, one replica call out.

Owns the request path: read the snapshot once, normalise the path (400 for
dot segments and encoded slashes) and resolve the route, read the body
(bounded in size, by the endpoint's `max_body_bytes` under the proxy's
ceiling, 413 at once when Content-Length says more; in time, 408; and in all:
the bodies a worker holds at once, 503 past its budget), pick a backend by weight, copy to
shadows, get a replica slot (waiting in the bounded queue if needed), call it
under the endpoint's timeout (the deadline, and the client's leaving, kept by
`proxy.pipeline.running_calls`), retry once on another replica when an
idempotent request's replica died or stalled (`proxy.pool.stalls`: a call that ran
out its timeout on a replica that answered nothing meanwhile takes that
replica out of routing; the other calls it held are retried or answered 504), and map every outcome to the status codes
of docs/reference/http.md's table. A client that leaves before its body is read
causes no replica call (recorded as 499); a truncated body is never
forwarded; a client that leaves while its call runs cancels it (499). The
route prefix goes along with each request (`with_root_path`), so an ASGI
app in the replica serves under it.

A streaming answer (`StreamStart`, see `proxy.pipeline.streaming`) is sent as it
comes: the endpoint's `timeout_s` bounds the time to its first chunk and
each gap between chunks; it is never copied to shadows or compared.
WebSocket connections are handed to `proxy.pipeline.websockets`.

Hop-by-hop headers are dropped both ways; shadow copies also lose every
credential-looking header (`proxy.observability.redacting.credential_like`,
by pattern: any name with auth, key, token, secret, password, session,
credential or cookie in it once `_` reads as `-`: no endpoint can opt back
in, a candidate backend is not trusted with users' credentials) and the query
string unless the endpoint sets `shadow_query`.

Deliberately a bare ASGI callable rather than a Starlette app: the hot path
allocates only the wire tuple and the response events, and logs nothing
unless something failed. Replica calls go through `proxy.pool.calling`; results
are reported through one `Recorder`, the single place metrics hook in.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import logging
import math
import random
import time
from dataclasses import dataclass
from typing import Any, AsyncGenerator, Callable, Protocol, Sequence

from httpedge.asgi import Receive, Scope, Send
from proxy.pool.calling import Caller, HandlerError, ReplicaDiedError
from proxy.pipeline.running_calls import ClientLeft, RunningCalls
from vocabulary.request_path.choosing import Random
from proxy.routes.snapshot import ServedEndpoint, Snapshot
from proxy.observability.metrics import ShadowResult
from proxy.pool.replicas import NoReplicaError, QueueFullError, ReplicaPool, ReplicaSlot
from proxy.routes.rate_limits import AmbiguousTenant, Buckets, LocalBuckets, TenantLimit
from proxy.observability.request_stats import RequestCounter
from proxy.routes.routing import Resolution, normalise_path, resolve
from proxy.settings import ProxySettings
from proxy.pipeline.websockets import WebSocketCarrier
from proxy.pipeline.streaming import StreamEnd, relay, stream_code
from proxy.observability.tracing import RequestTracing, Traced
from proxy.observability.capture import CaptureWriter
from proxy.observability.redacting import Exchange, Flow, ShadowAnswer, credential_like
from proxy.observability.shadow_compare import Comparison, Mismatch, MismatchLog, compare
from vocabulary.spec.endpoints import ShadowCompare
from vocabulary.control.request_stats import RequestStats
from vocabulary.request_path.multiplexing import ModelReport
from vocabulary.request_path.wire import (
    LOAD_HEADER,
    MODELS_HEADER,
    Reply,
    StreamStart,
    WireRequest,
    WireResponse,
    with_root_path,
)

__all__ = ["ProxyApp", "Recorder", "NullRecorder"]

logger = logging.getLogger(__name__)

_IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS"})
_TEXT = [(b"content-type", b"text/plain; charset=utf-8")]
_JSON = [(b"content-type", b"application/json")]
_CLOSE = [(b"connection", b"close")]
# RFC 9110 7.6.1: meaningful for one connection only, never forwarded.
_HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"te", b"trailer", b"transfer-encoding", b"upgrade"}
)
CLIENT_LEFT = 499  # nginx's code for a client that closed the connection first
_WATCH_AFTER_S = 0.05  # a request running longer than this is watched for its client leaving
_DEADLINE_SLACK_S = 0.01  # a cancellation this close to a call's deadline is the deadline's


class Recorder(Protocol):
    """Where the outcome of every request and shadow copy is reported (`proxy.observability.metrics.ProxyMetrics`)."""

    def request_done(self, endpoint: str, backend: str, code: int, duration_s: float) -> None: ...

    def shadow_done(self, endpoint: str, backend: str, result: ShadowResult) -> None: ...

    def shadow_compared(self, endpoint: str, backend: str, matched: bool) -> None: ...

    def first_byte(self, endpoint: str, backend: str, seconds: float) -> None:
        """A streamed answer's time to its first chunk, or a WebSocket's to its accept."""

    def session_done(self, endpoint: str, backend: str, code: int) -> None:
        """A WebSocket session ended (`proxy.pipeline.websockets` says with which code)."""

    def rate_limited(self, endpoint: str) -> None:
        """A request was refused (429): its tenant was over the endpoint's limit."""

    def stream_done(self, endpoint: str, backend: str, gaps: list[float]) -> None:
        """A streamed answer ended: the gap before each chunk after its head."""

    def replica_stalled(self, backend: str) -> None:
        """A replica of `backend` was found stalled (`proxy.pool.stalls`) and taken out of routing."""

    def model_served(self, backend: str, model: str, loaded: bool, evicted: Sequence[str]) -> None:
        """A multiplexed backend answered a request for `model`: whether its replica loaded
        it for this request, and the models it evicted to make room."""


class NullRecorder:
    """Records nothing: a proxy started without a metrics port."""

    def request_done(self, endpoint: str, backend: str, code: int, duration_s: float) -> None:
        pass

    def shadow_done(self, endpoint: str, backend: str, result: ShadowResult) -> None:
        pass

    def shadow_compared(self, endpoint: str, backend: str, matched: bool) -> None:
        pass

    def first_byte(self, endpoint: str, backend: str, seconds: float) -> None:
        pass

    def session_done(self, endpoint: str, backend: str, code: int) -> None:
        pass

    def rate_limited(self, endpoint: str) -> None:
        pass

    def stream_done(self, endpoint: str, backend: str, gaps: list[float]) -> None:
        pass

    def replica_stalled(self, backend: str) -> None:
        pass

    def model_served(self, backend: str, model: str, loaded: bool, evicted: Sequence[str]) -> None:
        pass


@dataclass(frozen=True)
class _Streaming:
    """A streaming answer's head, with the replica slot it keeps until it ends."""

    pool: ReplicaPool
    slot: ReplicaSlot
    start: StreamStart


class _Reply(Exception):
    """Ends a request early with a proxy-made answer."""

    def __init__(self, status: int, text: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        super().__init__(text)
        self.status = status
        self.text = text
        self.headers = headers or []


class ProxyApp:
    """The ASGI callable `httpedge.server` serves; holds the current snapshot
    and the shadow copies in flight."""

    def __init__(
        self,
        caller: Caller,
        settings: ProxySettings = ProxySettings(),
        rng: Random | None = None,
        recorder: Recorder | None = None,
        mismatches: MismatchLog | None = None,
        buckets: Buckets | None = None,
        tracing: RequestTracing | None = None,
        capture: CaptureWriter | None = None,
    ) -> None:
        """`mismatches`: where shadow mismatches are kept and answered from (default: this process's memory);
        `buckets`: the tenants' token buckets (default: this process's own; a node's workers share theirs);
        `tracing`: the request spans (`proxy.observability.tracing`; None: tracing off, one branch per request);
        `capture`: where `[capture]` records go (`proxy.observability.capture`; None: nothing is captured)."""
        self._caller = caller
        self._settings = settings
        self._rng: Random = rng or random.Random()
        self._recorder = recorder or NullRecorder()
        self._snapshot = Snapshot()
        # Until its first complete route table arrives a proxy (new, or
        # restarted) does not know which paths exist: it answers 503 +
        # Retry-After (never a 404 that a client would cache or give up on)
        # and is not healthy.
        self._routed = False
        self._shadow_tasks: set[asyncio.Task[None]] = set()
        self._shadow_in_flight: dict[str, int] = {}
        self._retry_after = [(b"retry-after", str(settings.retry_after_s).encode())]
        self._counts = RequestCounter()
        self._websockets = WebSocketCarrier(caller, self._rng, self._recorder, self._counts, tracing, capture)
        self._calls = RunningCalls(_WATCH_AFTER_S)
        self.mismatches = mismatches if mismatches is not None else MismatchLog()
        self._buckets = buckets if buckets is not None else LocalBuckets()
        self._tracing = tracing
        self._capture = capture
        self._bodies = _BodyBudget(settings.max_bodies_in_flight_bytes, self._retry_after)

    # --- the config side -----------------------------------------------------

    def install(self, snapshot: Snapshot) -> None:
        """Serve `snapshot` from the next request on (one atomic assignment)."""
        self._snapshot = snapshot
        self._routed = self._routed or snapshot.complete

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    def backend_load(self) -> dict[str, dict[str, float]]:
        """Per backend: requests in flight on replicas, waiting in the queue,
        and turned away in the last second because it had no replica; the
        sum of its replicas' reported loads, once one has reported; and for a
        multiplexed backend its hottest model's in-flight load (`hot`)."""
        loads: dict[str, dict[str, float]] = {}
        for name, pool in self._snapshot.pools.items():
            load: dict[str, float] = {"ongoing": pool.ongoing(), "queued": pool.queued(), "unserved": pool.unserved()}
            if pool.multiplex is not None:
                load["hot"] = pool.scaling_ongoing()  # what the autoscaler is told (proxy.pool.multiplexing)
            reported = pool.reported()
            if reported is not None:
                load["reported"] = reported
            loads[name] = load
        return loads

    def stalled_replicas(self) -> dict[str, dict[str, str]]:
        """Per backend, the replicas found stalled that the controller still lists (id -> what was seen)."""
        return {name: hung for name, pool in self._snapshot.pools.items() if (hung := pool.stalled())}

    def request_stats(self) -> dict[str, RequestStats]:
        """Per backend, the answers counted since this proxy started (for rollout checks)."""
        return self._counts.snapshot()

    def endpoint_request_stats(self) -> dict[str, RequestStats]:
        """Per endpoint, the answers counted since this proxy started (for the status)."""
        return self._counts.by_endpoint()

    # --- the request side ----------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "websocket":
                await self._websockets.carry(self._snapshot if self._routed else None, scope, receive, send)
            return
        path = normalise_path(scope.get("raw_path") or scope["path"].encode())
        if path is None:
            await _send(send, 400, _TEXT, b"Bad Request: dot segments and encoded slashes are not allowed in paths")
            return
        if path.startswith("/-/"):
            await self._admin(path, send)
            return
        if not self._routed:
            await _send(send, 503, [*_TEXT, *self._retry_after], b"Starting: no route table yet")
            return
        snapshot = self._snapshot
        resolution, route = resolve(snapshot.routes, path, scope["method"])
        if route is None:
            await _send(send, 404, _TEXT, b"Not Found")
            return
        if resolution is Resolution.METHOD_NOT_ALLOWED:
            await _send(send, 405, [*_TEXT, (b"allow", route.allow.encode())], b"Method Not Allowed")
            return
        served = snapshot.endpoints[route.endpoint]
        if served.limits is not None and await self._refused_by_limit(served.limits, scope, send):
            return
        started = time.perf_counter()
        backend = served.pick(scope["headers"], self._rng)
        traced = None if self._tracing is None else self._begin_trace(served, backend, scope, path)
        primary: asyncio.Future[WireResponse] | None = None
        captured: Exchange | None = None
        held = 0  # body bytes this request counts against the worker's budget until it ends
        try:
            if _framed(scope["headers"]):
                limit = min(served.max_body_bytes, self._settings.max_body_bytes)
                declared = _declared_length(scope["headers"])
                if declared > limit:
                    raise _Reply(413, "Request body too large")  # said up front: not one byte of it is read
                body = await _read_body(receive, limit, self._settings.edge.body_timeout_s, self._bodies, declared)
                held = len(body)
            else:
                # No body (RFC 9112 6.3): the server hands its one empty message over at once, so no deadline.
                _request_message(await receive())
                body = b""
            if served.steering.reads_body:
                backend = served.pick(scope["headers"], self._rng, body)  # JSON match rules read the body
                if traced is not None:
                    traced.span.set_attribute("gitops.backend", backend)
            headers = with_root_path(_end_to_end(scope["headers"]), route.prefix)
            if traced is not None:
                headers = traced.carry(headers)
            request: WireRequest = (scope["method"], path, scope["query_string"], headers, body)
            captured = None if served.capture is None else self._draw_capture(served, backend, request)
            if served.shadow.shares:
                primary = self._copy_to_shadows(snapshot, served, request, captured)
            # The call is awaited here, between `RunningCalls.enter` and `leave`: no wrapper coroutine.
            running = self._calls.enter(receive, served.timeout_s)
            try:
                reply = await self._forward(snapshot.pools.get(backend), request, running.deadline_at, traced, captured)
            except asyncio.CancelledError:
                instead = self._calls.why_cancelled(running)
                if instead is None:
                    raise
                if isinstance(instead, TimeoutError):
                    raise _Reply(504, "Gateway Timeout") from None
                raise instead from None
            finally:
                self._calls.leave(running)
            if isinstance(reply, _Streaming):
                if primary is not None:
                    primary.cancel()  # a stream is never compared
                await self._stream(reply, served, backend, started, receive, send, traced, captured)
                return
            status, headers, payload = reply
            headers = _end_to_end(headers)
        except _Reply as reply:
            status, headers, payload = reply.status, [*_TEXT, *reply.headers], reply.text.encode()
        except ClientLeft as left:
            logger.info("%s %s: client left %s (499)", scope["method"], path, left)
            self._recorder.request_done(served.name, backend, CLIENT_LEFT, time.perf_counter() - started)
            if traced is not None:
                traced.end(CLIENT_LEFT, 0, _commit(snapshot, backend))
            return
        finally:
            if held:
                self._bodies.give(held)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})
        if traced is not None:
            traced.end(status, len(payload), _commit(snapshot, backend))
        duration_s = time.perf_counter() - started
        if captured is not None:
            self._offer_capture(captured, _commit(snapshot, backend), traced, status, headers, payload, duration_s)
        self._recorder.request_done(served.name, backend, status, duration_s)
        self._counts.record(backend, status, duration_s, served.name)
        if primary is not None:
            # Compared only now: the primary's answer has already gone out.
            primary.set_result((status, headers, payload))

    async def _refused_by_limit(self, limit: TenantLimit, scope: Scope, send: Send) -> bool:
        """Whether the request's tenant is over the endpoint's limit, or ambiguous (its key sent
        twice); if so, it is answered here: 429, or 400 saying which key."""
        try:
            slot = limit.slot(scope["query_string"], scope["headers"])
        except AmbiguousTenant as error:
            await _send(send, 400, _TEXT, f"Bad Request: {error}".encode())
            return True
        wait_s = self._buckets.take(slot, limit.rate, limit.burst, time.monotonic())
        if not wait_s:
            return False
        self._recorder.rate_limited(limit.endpoint)
        retry_after = str(max(1, math.ceil(wait_s))).encode()
        await _send(send, 429, [*_TEXT, (b"retry-after", retry_after)], b"Too Many Requests")
        return True

    def _draw_capture(self, served: ServedEndpoint, backend: str, request: WireRequest) -> Exchange | None:
        if self._capture is None or served.capture is None:
            return None
        return self._capture.draw(served.capture, served.name, backend, request, served.rollout_step)

    def _offer_capture(
        self, captured: Exchange, commit: str | None, traced: Traced | None, status: int,
        headers: list[tuple[bytes, bytes]], payload: bytes, duration_s: float,
    ) -> None:
        """Hand the answered exchange to the capture writer (it redacts and writes on its own thread)
        once its shadow copies, if any, have answered too."""
        captured.status, captured.response_headers, captured.response_body = status, headers, payload
        captured.latency_s, captured.commit = duration_s, commit
        if traced is not None:
            captured.trace_id = f"{traced.span.get_span_context().trace_id:032x}"
        captured.answered = True
        self._capture_done(captured)

    def _capture_done(self, captured: Exchange) -> None:
        """Offer the record once the primary answered and no shadow copy is still out (exactly once)."""
        if captured.answered and captured.shadows_out == 0 and self._capture is not None:
            self._capture.offer(captured)

    def _begin_trace(self, served: ServedEndpoint, backend: str, scope: Scope, path: str) -> Traced | None:
        assert self._tracing is not None
        return self._tracing.begin(
            served.name, backend, served.trace_sample, scope["method"], path, scope["headers"],
            rollout_step=served.rollout_step,
        )

    async def _stream(
        self, streaming: _Streaming, served: ServedEndpoint, backend: str, started: float, receive: Receive,
        send: Send, traced: Traced | None = None, captured: Exchange | None = None,
    ) -> None:
        start = streaming.start
        try:
            await send({"type": "http.response.start", "status": start.status, "headers": _end_to_end(start.headers)})
            await send({"type": "http.response.body", "body": start.first_chunk, "more_body": True})
            self._recorder.first_byte(served.name, backend, time.perf_counter() - started)
            chunks = self._caller.stream(streaming.slot.handle, start)
            if captured is not None:
                captured.kind, captured.stream = "stream", Flow(captured.redaction.max_body_bytes)
                captured.stream.add(start.first_chunk)
                chunks = _tapped(chunks, captured.stream)
            gaps: list[float] = []
            status = await relay(chunks, send, served.timeout_s, receive, start.status, gaps)
        finally:
            streaming.pool.release(streaming.slot)
        self._recorder.stream_done(served.name, backend, gaps)
        if status == StreamEnd.REPLICA_DIED:
            streaming.pool.drop(streaming.slot)
        code = stream_code(status, start.status)
        if code != start.status:
            logger.warning("stream of %s from backend %s ended early: %s", served.name, backend, status.value)
        duration_s = time.perf_counter() - started
        self._recorder.request_done(served.name, backend, code, duration_s)
        if traced is not None:
            traced.span.set_attribute("gitops.stream", True)
            traced.end(code, -1, streaming.pool.commit)
        if captured is not None and code != CLIENT_LEFT:
            self._offer_capture(captured, streaming.pool.commit, traced, code, _end_to_end(start.headers), b"", duration_s)
        if code != CLIENT_LEFT:
            self._counts.record(backend, code, duration_s, served.name)

    async def _forward(
        self, pool: ReplicaPool | None, request: WireRequest, deadline_at: float, traced: Traced | None = None,
        captured: Exchange | None = None,
    ) -> WireResponse | _Streaming:
        """The replica's answer, retried once on another replica for GET, HEAD and OPTIONS
        when the first died or stalled (`proxy.pool.stalls`: 504 otherwise); the endpoint's
        deadline is held by the caller's `RunningCalls.enter`."""
        if pool is None:
            raise _Reply(503, "No replica available", self._retry_after)
        attempts = 2 if request[0] in _IDEMPOTENT else 1
        key = pool.request_key(request)  # None unless the backend's routing policy reads a key
        served = None
        if pool.multiplex is not None and key is not None:
            if not pool.multiplex.accepts(key.decode("utf-8", "replace")):
                raise _Reply(400, f"Bad Request: the {pool.multiplex.header} header names no model this backend serves")
            served = self._model_served(pool.backend, key, pool.multiplex.label)
        task: asyncio.Task[object] | None = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        stalled = False
        for _ in range(attempts):
            slot = pool.free_slot(key) or await self._acquire(pool, key, stalled)
            if traced is not None:
                traced.replica = slot.replica_id
            if captured is not None:
                captured.replica = slot.replica_id
            held = False
            progress = slot.progress  # proxy.pool.stalls: sent, answered, outstanding since when
            progress.on_sent(task, loop.time())
            try:
                remaining = deadline_at - loop.time()
                reply: Reply = _took_load(
                    slot, await self._caller.call(slot.handle, request, remaining, pool.batching), served
                )
                progress.on_answered(task, loop.time())
                if isinstance(reply, StreamStart):
                    held = True  # the slot stays taken until the stream ends
                    return _Streaming(pool, slot, reply)
                return reply
            except ReplicaDiedError as error:
                pool.drop(slot)
                logger.warning("replica %s of %s died under a request: %s", slot.replica_id, pool.backend, error)
            except HandlerError as error:
                progress.on_answered(task, loop.time())
                logger.error("handler of backend %s raised:\n%s", pool.backend, error)
                raise _Reply(500, "Internal Server Error") from None
            except asyncio.CancelledError:
                if not pool.cancelled_by_stall(task):
                    if loop.time() >= deadline_at - _DEADLINE_SLACK_S:
                        self._check_stall(pool, slot, task, loop.time())
                    raise
                # Its replica stalled under another request: retry (idempotent) or 504, not a
                # cancellation; unless its own deadline or client ended it too (their answer stands).
                if task.uncancel() > 0:
                    raise
                if loop.time() >= deadline_at - _DEADLINE_SLACK_S:
                    raise _Reply(504, "Gateway Timeout") from None  # no time left to retry
                stalled = True
            finally:
                progress.on_ended(task)
                if not held:
                    pool.release(slot)
        if stalled:
            raise _Reply(504, "Gateway Timeout: the replica stalled")
        raise _Reply(502, "Bad Gateway: the replica died")

    def _model_served(self, backend: str, key: bytes, label: Callable[[str], str]) -> Callable[[ModelReport], None]:
        """Counts a multiplexed request under its model's `label` (the model when the spec
        names it, else 'other': a client's ids never become metric labels), once its replica
        holds it, with the load and evictions it caused."""
        model = key.decode("utf-8", "replace")

        def served(report: ModelReport) -> None:
            if model in report.loaded:
                self._recorder.model_served(backend, label(model), report.loaded_now, [label(m) for m in report.evicted])

        return served

    def _check_stall(self, pool: ReplicaPool, slot: ReplicaSlot, task: asyncio.Task[object], now: float) -> None:
        """A call ran out its endpoint's timeout: when its replica answered nothing
        meanwhile, it is stalled (`proxy.pool.stalls`): out of routing, reported, counted."""
        stall = pool.timed_out(slot, task, now)
        if stall is not None:
            logger.warning("backend %s: replica %s stalled (%s); taken out of routing", pool.backend,
                           slot.replica_id, stall.message())
            self._recorder.replica_stalled(pool.backend)

    async def _acquire(self, pool: ReplicaPool, key: bytes | None, after_stall: bool) -> ReplicaSlot:
        try:
            return await pool.acquire(key)
        except NoReplicaError:
            if after_stall:  # the retry of a call its replica stalled under: docs/reference/http.md says 504
                raise _Reply(504, "Gateway Timeout: the replica stalled") from None
            raise _Reply(503, "No replica available", self._retry_after) from None
        except QueueFullError:
            raise _Reply(503, "Backend queue is full", self._retry_after) from None

    # --- shadow traffic ---------------------------------------------------------

    def _copy_to_shadows(
        self, snapshot: Snapshot, served: ServedEndpoint, request: WireRequest, captured: Exchange | None = None,
    ) -> asyncio.Future[WireResponse] | None:
        """Start the shadow copies; with a comparison, the future the primary's
        reply is set on (None when nothing is compared). A captured request's
        record waits for its copies' answers (and verdicts) and carries them."""
        method, path, query, headers, body = request
        kept = [(name, value) for name, value in headers if not credential_like(name)]
        request = (method, path, query if served.shadow_query else b"", kept, body)
        primary: asyncio.Future[WireResponse] | None = None
        for backend in served.shadow.sample(self._rng):
            pool = snapshot.pools.get(backend)
            slot = self._shadow_slot(backend, pool)
            if pool is None or slot is None:
                self._recorder.shadow_done(served.name, backend, ShadowResult.DROPPED)
                if captured is not None:
                    captured.shadows.append(ShadowAnswer(backend, ShadowResult.DROPPED.value))
                continue
            if primary is None and served.compare is not ShadowCompare.NONE:
                primary = asyncio.get_running_loop().create_future()
            if captured is not None:
                captured.shadows_out += 1
            task = asyncio.ensure_future(self._shadow(served, pool, slot, request, primary, captured))
            self._shadow_tasks.add(task)
            task.add_done_callback(self._shadow_tasks.discard)
        return primary

    def _shadow_slot(self, backend: str, pool: ReplicaPool | None) -> ReplicaSlot | None:
        # Shadows never wait: a saturated shadow backend drops the copy.
        if pool is None or self._shadow_in_flight.get(backend, 0) >= self._settings.max_shadow_in_flight:
            return None
        slot = pool.try_acquire()
        if slot is not None:
            self._shadow_in_flight[backend] = self._shadow_in_flight.get(backend, 0) + 1
        return slot

    async def _shadow(
        self, served: ServedEndpoint, pool: ReplicaPool, slot: ReplicaSlot, request: WireRequest,
        primary: asyncio.Future[WireResponse] | None, captured: Exchange | None = None,
    ) -> None:
        result = ShadowResult.OK
        reply: WireResponse | None = None
        try:
            async with asyncio.timeout(served.timeout_s):
                answer = _took_load(slot, await self._caller.call(slot.handle, request, served.timeout_s, pool.batching))
            if isinstance(answer, StreamStart):
                self._caller.discard(slot.handle, answer)
            else:
                reply = answer  # a stream is never compared
        except ReplicaDiedError:
            pool.drop(slot)
            result = ShadowResult.ERROR
        except HandlerError:
            result = ShadowResult.ERROR
            reply = (500, _TEXT, b"Internal Server Error")  # what a client would have got
        except TimeoutError:
            result = ShadowResult.TIMEOUT
        finally:
            pool.release(slot)
            self._shadow_in_flight[pool.backend] -= 1
        self._recorder.shadow_done(served.name, pool.backend, result)
        found = None
        try:
            if primary is not None and reply is not None:
                found = await self._compare(served, pool.backend, request[1], primary, reply)
        finally:
            if captured is not None:
                shadowed = ShadowAnswer(pool.backend, result.value, reply)
                if found is not None:
                    # The record names JSON paths and types, never values, whatever shadow_values says.
                    shadowed.matched, shadowed.diff = found[1].matched, found[1].diff
                captured.shadows.append(shadowed)
                captured.shadows_out -= 1
                self._capture_done(captured)

    async def _compare(
        self, served: ServedEndpoint, backend: str, path: str, primary: asyncio.Future[WireResponse], reply: WireResponse
    ) -> tuple[Comparison, Comparison] | None:
        """The comparison as the mismatch sample shows it and as a capture record may
        (paths and types only); None when there was nothing to compare with."""
        try:
            async with asyncio.timeout(served.timeout_s):
                answered = await asyncio.shield(primary)
        except TimeoutError:
            return None  # the primary never answered: nothing to compare with
        except asyncio.CancelledError:
            if primary.cancelled():
                return None  # the primary streamed: nothing to compare with
            raise
        found = compare(served.compare, served.ignore, answered, reply, served.shadow_values)
        self._recorder.shadow_compared(served.name, backend, found.matched)
        if not found.matched:
            self.mismatches.record(Mismatch(time.time(), served.name, backend, path, answered[0], reply[0], found.diff))
        recordable = found if not served.shadow_values else compare(served.compare, served.ignore, answered, reply, False)
        return found, recordable

    # --- the proxy's own routes ------------------------------------------------

    async def _admin(self, path: str, send: Send) -> None:
        if path == "/-/healthz":
            await _send(send, *((200, _TEXT, b"ok") if self._routed else (503, _TEXT, b"starting")))
        elif path == "/-/routes":
            await _send(send, 200, _JSON, self._snapshot.routes_json)
        else:
            await _send(send, 404, _TEXT, b"Not Found")

    async def stop_shadows(self) -> None:
        for task in list(self._shadow_tasks):
            task.cancel()
        await asyncio.gather(*self._shadow_tasks, return_exceptions=True)


async def _tapped(chunks: AsyncGenerator[bytes, None], flow: Flow) -> AsyncGenerator[bytes, None]:
    """`chunks` as they come, each counted (and the first bytes kept) for a capture record."""
    try:
        async for chunk in chunks:
            flow.add(chunk)
            yield chunk
    finally:
        await chunks.aclose()


def _commit(snapshot: Snapshot, backend: str) -> str | None:
    """The commit `backend`'s replicas run, as its replica set says."""
    pool = snapshot.pools.get(backend)
    return None if pool is None else pool.commit


def _took_load(slot: ReplicaSlot, reply: Reply, served: Callable[[ModelReport], None] | None = None) -> Reply:
    """`reply` without the load its replica reported and, for a multiplexed backend,
    the models it holds (its last headers, if any), which the replica's slot keeps
    for the routing policies; `served` is told what the request made it load."""
    headers = reply.headers if isinstance(reply, StreamStart) else reply[1]
    end = len(headers)
    if end and headers[end - 1][0] == MODELS_HEADER:
        report = slot.note_models(headers[end - 1][1])
        if report is not None and served is not None:
            served(report)
        end -= 1
    if end and headers[end - 1][0] == LOAD_HEADER:
        slot.note_load(headers[end - 1][1])
        end -= 1
    if end == len(headers):
        return reply
    if isinstance(reply, StreamStart):
        return dataclasses.replace(reply, headers=headers[:end])
    return reply[0], headers[:end], reply[2]


def _end_to_end(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """`headers` without hop-by-hop ones: the fixed set, `Proxy-*`, and any `Connection` names."""
    for name, _ in headers:
        if name in _HOP_BY_HOP or name[:6] == b"proxy-":
            break
    else:
        return headers  # the common case: nothing to drop (names in `Connection` need a `Connection`)
    named = {token.strip().lower() for name, value in headers if name == b"connection" for token in value.split(b",")}
    return [
        (name, value) for name, value in headers
        if name not in _HOP_BY_HOP and not name.startswith(b"proxy-") and name not in named
    ]


def _framed(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether the request says it has a body (Content-Length other than 0, or Transfer-Encoding)."""
    for name, value in headers:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return True
    return False


def _declared_length(headers: list[tuple[bytes, bytes]]) -> int:
    """The body's length its Content-Length says; 0 without one (or one that is no number, which the
    server refuses before the app is called)."""
    for name, value in headers:
        if name == b"content-length":
            return int(value) if value.strip().isdigit() else 0
    return 0


class _BodyBudget:
    """The request body bytes one worker holds at once, from their first byte read until their
    request ends: every endpoint's limit times every connection would be far more memory than a
    worker has, so past the budget a body is refused (503, Retry-After) as it arrives."""

    __slots__ = ("free", "_refusal_headers")

    def __init__(self, size: int, retry_after: list[tuple[bytes, bytes]]) -> None:
        self.free = size
        self._refusal_headers = [*retry_after, *_CLOSE]

    def take(self, size: int) -> None:
        if size > self.free:
            raise _Reply(503, "Too many request bodies in flight", self._refusal_headers)
        self.free -= size

    def give(self, size: int) -> None:
        self.free += size


async def _read_body(
    receive: Receive, limit: int, timeout_s: float, budget: _BodyBudget, declared: int = 0
) -> bytes:
    """The whole body of a request that frames one, taken from `budget` as it arrives (the caller
    gives it back; a body its Content-Length `declared` is taken whole once it comes in more than
    one message, when its buffer is made): 413 past `limit`, 503 past the budget, 408 past
    `timeout_s`, `ClientLeft` if the client went away (what was taken of a body not read whole is
    given back here)."""
    taken = [0]
    try:
        async with asyncio.timeout(timeout_s):
            return await _read_all(receive, limit, budget, taken, declared)
    except TimeoutError:
        budget.give(taken[0])
        raise _Reply(408, "Request body not complete in time", _CLOSE) from None
    except BaseException:
        budget.give(taken[0])
        raise


def _request_message(message: dict[str, Any]) -> dict[str, Any]:
    """The request's first message; `ClientLeft` when it says the client went away."""
    if message["type"] == "http.disconnect":
        raise ClientLeft("before its request was read; no replica called")
    return message


async def _read_all(receive: Receive, limit: int, budget: _BodyBudget, taken: list[int], declared: int) -> bytes:
    message = _request_message(await receive())
    body: bytes = message.get("body", b"")
    if len(body) > limit:
        raise _Reply(413, "Request body too large")
    budget.take(len(body))
    taken[0] = len(body)
    if not message.get("more_body", False):
        return body
    # Written into one buffer that getvalue() hands over as the body: a list of chunks joined at
    # the end would hold a large body twice while it is joined. With a Content-Length it is made
    # at its size, bytes shared with nobody, which CPython's BytesIO fills in place; growing it
    # chunk by chunk instead cost 34-48 ms per 16 MiB body in 64-256 KiB chunks (3 ms presized).
    if declared > len(body):
        budget.take(declared - len(body))
        taken[0] = declared
        chunks = io.BytesIO(bytes(declared))
    else:
        chunks = io.BytesIO()
    chunks.write(body)
    while message.get("more_body", False):
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientLeft("before its body was read; no replica called")  # a truncated body is never forwarded
        chunk = message.get("body", b"")
        if chunks.tell() + len(chunk) > limit:
            raise _Reply(413, "Request body too large")
        if chunks.tell() + len(chunk) > taken[0]:
            budget.take(chunks.tell() + len(chunk) - taken[0])  # beyond what was taken (no Content-Length)
            taken[0] = chunks.tell() + len(chunk)
        chunks.write(chunk)
    chunks.truncate()  # never past what came (the server ends a body short of its length as a disconnect)
    return chunks.getvalue()


async def _send(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
