"""The proxy's gRPC port: grpcio's aio server with one generic handler that routes every call by its service.

Off unless `gitops run --grpc-port` gives a port (`proxy.actor` starts it beside
the HTTP server, on the same host). grpcio does HTTP/2, gRPC's framing,
deadlines and flow control; its server options bound what a client may hold
(`proxy.settings.GrpcLimits`: message size, concurrent streams per connection,
metadata size, calls per worker, a fixed HTTP/2 window). The handler never
deserializes: each call's one request message and its replies pass as bytes
(of a v2 model method's request, only the model's name is read off them).

A call `/package.Service/Method` goes to the endpoint whose `grpc_service` is
`package.Service` (`Snapshot.grpc_services`; none: UNIMPLEMENTED, grpcio's own
answer; a v2 model method's call, to the endpoint of the model its message
names when several serve the v2 service, `Snapshot.grpc_models`), through
the same pieces as an HTTP request of that endpoint: its
chain of the gRPC stages (`GrpcIngress.stages`, of the app's: its `[limits]`, the backend
steered by its weights and header rules on the call's metadata, its span from
the metadata's W3C context, its capture record, its shadow copies, counting),
then one call to the replica pool (`proxy.pool.sending`: slot, queue,
retries, the data connection). It crosses as a wire request marked as a gRPC
call (`vocabulary.request_path.grpc_calls`), and the replica calls the backend's
method of that name (`replica.calling.grpc_calls`). The endpoint's `timeout_s` and the
client's `grpc-timeout`, whichever ends first, bound the call (and each gap of a
streamed reply by `timeout_s`); the replica is told the seconds left, as for an HTTP
request with a deadline (`vocabulary.request_path.deadlines`).

A call's handler is a server-streaming one (unless its requests stream, as
below): a unary call's reply is its one message, which a unary client reads
the same way; a reply the replica streams (`FRAMED`) is relayed message by
message as it comes. The methods an endpoint lists in `grpc_streaming`, and
those its backends' generated servicer declares so (`grpc_methods`, read by
the agent from the generated code; `ServedEndpoint.grpc_streaming` holds
both), take a stream of requests (client-streaming and bidirectional calls):
their handler is a bidirectional one, and the call rides a WebSocket session with one
replica (`Caller.open_websocket`, `push`: each request message pushed once the
replica's session has room for it, the client's half-close as its disconnect,
each reply relayed as it comes, the close code the call's status,
`vocabulary.request_path.grpc_calls.code_for_close`), through the endpoint's
limits, steering, tracing, capture (its messages counted both ways, the first
ones kept: the record's `requests` and `stream`) and counting
(`GrpcIngress.stream_stages`; no shadows: no copy of the messages is held), each
request message within its `max_body_bytes` (a larger one ends the requests and
the call, RESOURCE_EXHAUSTED), the whole call within its `timeout_s` and the
client's deadline.

Our refusals are gRPC status codes (`code_for_status` of the HTTP path's
status: a limit RESOURCE_EXHAUSTED, no replica UNAVAILABLE with `retry-after`
in the trailers, the deadline DEADLINE_EXCEEDED, the user's code raising
INTERNAL), a method's own refusal ends the call with the code it chose
(`code_of`), and every call is counted as a request of its endpoint with that
HTTP status (the metrics' `code` label; a client that left, 499).

The stages' `answered` hooks are given the call's trailers (`grpc-status`
and any `retry-after`) as the answer's headers, and as its body the reply
message that came whole (a refusal: its text), which the shadow comparison
and the capture record read; a reply the replica streamed is never compared,
and a captured call's streamed messages are counted one by one into its
record (`Exchange.stream`; a call's streamed requests into `Exchange.client`).

Not here: shadows of calls whose requests stream (no copy of their messages
is held), token budgets for gRPC calls (they read OpenAI usage in HTTP
bodies), TLS on the gRPC port (the HTTP port has none either).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from typing import Any, AsyncGenerator, AsyncIterator, Sequence

import grpc
import grpc.aio

from proxy.app import ProxyApp
from proxy.observability.bodies import EMPTY, BodyView
from proxy.observability.redacting import Flow
from proxy.pipeline.stages.admit import Admission
from proxy.pipeline.stages.capture import Capture
from proxy.pipeline.stages.count import Counting
from proxy.pipeline.stages.shadow import Shadowing
from proxy.pipeline.stage import Chain, Stage, chains
from proxy.pipeline.stages.steer import Steering
from proxy.pipeline.stages.trace import Tracing
from proxy.pipeline.streaming import ChunkGaps
from proxy.pipeline.transit import CLIENT_LEFT, Refusal, Transit, refusal_for
from proxy.pool.calling import HandlerError, ReplicaDiedError
from proxy.pool.replicas import NoReplicaError, QueueFullError
from proxy.pool.sending import Held, SendError
from proxy.routes.snapshot import Snapshot
from proxy.settings import GrpcLimits
from vocabulary.request_path.grpc_calls import (
    FRAMED,
    STATUS_HEADER,
    STREAM_CLOSE_OK,
    FramingError,
    Unframer,
    code_for_close,
    code_for_status,
    code_of,
    grpc_call,
    method_of,
    service_of,
    status_for_code,
)
from vocabulary.control.actor_apis import ReplicaHandle
from vocabulary.request_path.v2_calls import MODEL_METHODS, V2_SERVICE, model_named

__all__ = ["GrpcIngress", "serve_grpc"]

logger = logging.getLogger(__name__)

_CODES = {code.value[0]: code for code in grpc.StatusCode}
_HTTP_STATUS = {  # a gRPC status a call ended with, as the metrics count it (its HTTP twin)
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}


class _Ended(Exception):
    """A call ends with this gRPC status, counted as `status` (its HTTP twin)."""

    def __init__(
        self, status: int, details: str, trailers: Sequence[tuple[str, str]] = (), code: int | None = None
    ) -> None:
        super().__init__(details)
        self.status = status
        self.details = details
        self.trailers = tuple(trailers)
        self.code = _CODES[code_for_status(status) if code is None else code]

    @classmethod
    def of(cls, refused: Refusal) -> _Ended:
        trailers = [(name.decode(), value.decode()) for name, value in refused.headers if name == b"retry-after"]
        return cls(refused.status, refused.text, trailers)


class GrpcIngress(grpc.GenericRpcHandler):
    """The one handler of every method: routes a call by its service, through `app`'s stages and pools."""

    def __init__(self, app: ProxyApp, limits: GrpcLimits) -> None:
        self._app = app
        self._limits = limits
        self._starting = grpc.unary_stream_rpc_method_handler(self._not_routed)
        # A call's stages, of the app's (its one order): limits, steering, tracing (W3C context from the call's
        # metadata), capture (its own kind of record), the same shadows (one bound on copies in flight for both
        # ports) and counting; token budgets read HTTP bodies, and are not on for gRPC calls.
        self.stages: tuple[Stage, ...] = tuple(
            stage.for_grpc() if isinstance(stage, Capture) else stage
            for stage in app.stages if isinstance(stage, (Admission, Steering, Tracing, Capture, Shadowing, Counting))
        )
        # A call whose requests stream (`grpc_streaming`, or a servicer's): limits, steering, tracing, capture (its
        # messages counted both ways as they go by, the first ones kept) and counting; no copy of the messages is
        # held for a shadow, so shadows are not on for it (as a streamed answer is never compared).
        self.stream_stages: tuple[Stage, ...] = tuple(
            stage.for_grpc() if isinstance(stage, Capture) else stage
            for stage in app.stages if isinstance(stage, (Admission, Steering, Tracing, Capture, Counting))
        )
        self._chained: tuple[Snapshot | None, dict[str, Chain], dict[str, Chain]] = (None, {}, {})

    def _chains(self, snapshot: Snapshot) -> tuple[dict[str, Chain], dict[str, Chain]]:
        """`snapshot`'s chains of the endpoints that serve gRPC calls, and of those whose requests stream (by
        endpoint): built once per route table, at its first call."""
        if self._chained[0] is not snapshot:
            services = set(snapshot.grpc_services.values())
            served = [snapshot.endpoints[name] for name in {*services, *snapshot.grpc_models.values()}]
            streaming = [endpoint for endpoint in served if endpoint.name in services and endpoint.grpc_streaming]
            self._chained = (snapshot, chains(self.stages, served), chains(self.stream_stages, streaming))
        return self._chained[1], self._chained[2]

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        """The handler of a call, by its method's path; None (grpcio answers UNIMPLEMENTED) when
        no endpoint serves its service."""
        app = self._app
        if not app.routed:
            return self._starting
        path: str = handler_call_details.method
        service = service_of(path)
        snapshot = app.snapshot
        name = None if service is None else snapshot.grpc_services.get(service)
        if name is None:
            return None
        if snapshot.endpoints[name].grpc_streaming and method_of(path) in snapshot.endpoints[name].grpc_streaming:
            return grpc.stream_stream_rpc_method_handler(functools.partial(self._streaming, path))
        return grpc.unary_stream_rpc_method_handler(functools.partial(self._call, path))

    async def _not_routed(self, request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncGenerator[bytes, None]:
        context.set_trailing_metadata((("retry-after", self._app.retry_after[0][1].decode()),))
        await context.abort(grpc.StatusCode.UNAVAILABLE, "Starting: no route table yet")
        yield b""  # never reached: an async generator, as every handler here is

    async def _call(
        self, path: str, request: bytes, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncGenerator[bytes, None]:
        app = self._app
        snapshot = app.snapshot
        chains = self._chains(snapshot)[0]
        service = service_of(path) or ""
        name = snapshot.grpc_services.get(service)
        if snapshot.grpc_models and service == V2_SERVICE and method_of(path) in MODEL_METHODS:
            name = snapshot.grpc_models.get(model_named(request) or "", name)  # the endpoint of the model named
        if name is None or name not in chains:  # the table changed since the call was routed
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"no endpoint serves {path}")
        assert name is not None
        served, stages = snapshot.endpoints[name], chains[name]
        headers = _headers(context.invocation_metadata() or ())
        scope = {"type": "grpc", "method": "POST", "path": path, "headers": headers, "query_string": b""}
        transit = Transit(scope, path, snapshot, served, time.perf_counter())
        try:
            for hook in stages.begin:
                hook(transit)
        except Refusal as refused:  # before the message is taken: answered, not counted (as HTTP)
            await _end(context, _Ended.of(refused))
        status = CLIENT_LEFT  # unless it ends otherwise
        reply: list[bytes] = []  # the reply as the stages read it: the replica's whole body (not a stream's)
        try:
            if len(request) > served.max_body_bytes:
                raise _Ended(413, f"the request message of {len(request)} bytes is over the endpoint's "
                             f"max_body_bytes ({served.max_body_bytes})")
            transit.request = grpc_call(path, headers, request)
            for hook in stages.formed:
                hook(transit)
            async for message in self._replies(transit, stages, context, reply):
                yield message
            status = 200
        except _Ended as ended:
            status = ended.status
            _answered(transit, stages, status, [_status_trailer(ended.code.value[0]), *_trailers(ended)],
                      ended.details.encode())
            await _end(context, ended)
        finally:
            if status == CLIENT_LEFT:
                transit.duration_s = time.perf_counter() - transit.started
                for hook in stages.left:
                    hook(transit)
        _answered(transit, stages, status, [_status_trailer(0)], reply[0] if reply else b"")

    async def _replies(
        self, transit: Transit, stages: Chain, context: grpc.aio.ServicerContext[Any, Any], reply: list[bytes]
    ) -> AsyncGenerator[bytes, None]:
        """The reply messages of the call, as they come; raises `_Ended` for any other end. A reply
        that came whole is put in `reply` (the shadow comparison and the capture record read it)."""
        app, served = self._app, transit.served
        assert transit.request is not None
        remaining = context.time_remaining()
        timeout_s = served.timeout_s if remaining is None else min(served.timeout_s, remaining)
        loop = asyncio.get_running_loop()
        deadline_at = loop.time() + timeout_s
        pool = transit.snapshot.pools.get(transit.backend)
        if pool is not None and pool.batching is not None:  # its handler takes lists of HTTP requests
            raise _Ended(501, f"backend {transit.backend} batches its requests: it serves no gRPC calls")
        # Its span and its capture record name the replica that answered.
        seen = None if transit.traced is None and transit.captured is None else transit.seen
        try:
            async with asyncio.timeout_at(deadline_at):
                answer = await app.sender.send(
                    pool, transit.request, deadline_at, served.retries, seen, served.outliers, served.circuit,
                    # The replica is told the seconds left (its code's `time_left()`, and cancelled at it);
                    # a client's deadline shorter than timeout_s ending a call blames no replica.
                    travels=True, clients=timeout_s < served.timeout_s,
                )
        except TimeoutError:
            raise _Ended(504, "Deadline Exceeded: no reply within the call's deadline") from None
        except SendError as error:
            raise _Ended.of(refusal_for(error, app.retry_after)) from None
        if isinstance(answer, Held):
            transit.held = answer
            for hook in stages.streaming:  # a streamed reply is never compared with a shadow's
                hook(transit)
            async for message in self._streamed(transit, answer, deadline_at, reply):
                yield message
            return
        status, headers, body = answer
        if status != 200:  # the replica's own refusal: no such method, or the method's own status code
            raise _Ended(status, body.decode("utf-8", "replace"), code=code_of(status, headers))
        reply.append(body)
        if _content_type(headers) != FRAMED:
            yield body
            return
        unframer = Unframer(self._limits.max_message_bytes)
        try:
            messages = unframer.feed(body)
            unframer.finish()
        except FramingError as error:
            raise _Ended(500, f"the replica's reply is broken: {error}") from None
        flow = _messages_flow(transit)
        for message in messages:
            if flow is not None:
                flow.add(message)
            yield message

    async def _streamed(
        self, transit: Transit, held: Held, deadline_at: float, reply: list[bytes]
    ) -> AsyncGenerator[bytes, None]:
        """A reply the replica streams: its messages as they come (FRAMED), or one large message whole
        (then put in `reply`)."""
        app, served, start = self._app, transit.served, held.start
        framed = _content_type(start.headers) == FRAMED
        flow = _messages_flow(transit) if framed else None
        limit = self._limits.max_message_bytes
        unframer = Unframer(limit)
        whole: list[bytes] = [start.first_chunk]
        size = len(start.first_chunk)
        died = claimed = False
        gaps = ChunkGaps(app.recorder.gap_observer(served.name, transit.backend))
        loop = asyncio.get_running_loop()
        try:
            app.recorder.first_byte(served.name, transit.backend, time.perf_counter() - transit.started)
            if framed:
                for message in unframer.feed(start.first_chunk):
                    if flow is not None:
                        flow.add(message)
                    yield message
            chunks = app.caller.stream(held.slot.handle, start)
            claimed = True
            last = time.perf_counter()
            try:
                while True:
                    # Each gap bounded by the endpoint's timeout_s, the whole by the call's deadline.
                    wait_s = min(served.timeout_s, deadline_at - loop.time())
                    try:
                        chunk = await asyncio.wait_for(anext(chunks), max(wait_s, 0.0))
                    except StopAsyncIteration:
                        break
                    now = time.perf_counter()
                    gaps.count += 1
                    gaps.observe(now - last)
                    last = now
                    if framed:
                        for message in unframer.feed(chunk):
                            if flow is not None:
                                flow.add(message)
                            yield message
                        continue
                    size += len(chunk)
                    if size > limit:
                        raise _Ended(500, f"the reply is over the gRPC port's message limit ({limit} bytes)")
                    whole.append(chunk)
            finally:
                await chunks.aclose()
            if framed:
                unframer.finish()
            else:
                reply.append(b"".join(whole))
                yield reply[0]
        except TimeoutError:
            raise _Ended(504, "Deadline Exceeded: the replica's stream stopped within the call's deadline") from None
        except ReplicaDiedError:
            died = True
            raise _Ended(502, "the replica died during the reply") from None
        except HandlerError as error:
            logger.error("a streaming gRPC method raised:\n%s", error)
            raise _Ended(500, "the backend's method raised") from None
        except FramingError as error:
            raise _Ended(500, f"the replica's reply is broken: {error}") from None
        finally:
            if not claimed:
                app.caller.discard(held.slot.handle, start)
            held.pool.release(held.slot)
            if died:
                held.pool.drop(held.slot)
            app.recorder.stream_done(served.name, transit.backend, 1 + gaps.count)  # the head's chunk and the rest


    async def _streaming(
        self, path: str, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncGenerator[bytes, None]:
        """A call whose requests stream (client-streaming or bidirectional): its endpoint's stream stages,
        then a session with one replica carrying the messages both ways as they come."""
        app = self._app
        snapshot = app.snapshot
        chains = self._chains(snapshot)[1]
        name = snapshot.grpc_services.get(service_of(path) or "")
        if name is None or name not in chains:  # the table changed since the call was routed
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"no endpoint serves {path} with streamed requests")
        assert name is not None
        served, stages = snapshot.endpoints[name], chains[name]
        headers = _headers(context.invocation_metadata() or ())
        scope = {"type": "grpc", "method": "POST", "path": path, "headers": headers, "query_string": b""}
        transit = Transit(scope, path, snapshot, served, time.perf_counter())
        try:
            for hook in stages.begin:
                hook(transit)
        except Refusal as refused:
            await _end(context, _Ended.of(refused))
        status = CLIENT_LEFT
        try:
            transit.request = grpc_call(path, headers, b"")  # the messages follow on the session
            for hook in stages.formed:
                hook(transit)
            async for message in self._session(transit, requests, context):
                yield message
            status = 200
        except _Ended as ended:
            status = ended.status
            _answered(transit, stages, status, [_status_trailer(ended.code.value[0]), *_trailers(ended)],
                      ended.details.encode())
            await _end(context, ended)
        finally:
            if status == CLIENT_LEFT:
                transit.duration_s = time.perf_counter() - transit.started
                for hook in stages.left:
                    hook(transit)
        _answered(transit, stages, status, [_status_trailer(0)], b"")

    async def _session(
        self, transit: Transit, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncGenerator[bytes, None]:
        """The replies of a streaming-request call's session, as they come; raises `_Ended` for any other end.
        The whole call is bounded by the endpoint's `timeout_s` and the client's deadline, as a unary one."""
        app, served = self._app, transit.served
        assert transit.request is not None
        remaining = context.time_remaining()
        loop = asyncio.get_running_loop()
        deadline_at = loop.time() + (served.timeout_s if remaining is None else min(served.timeout_s, remaining))
        pool = transit.snapshot.pools.get(transit.backend)
        if pool is not None and pool.batching is not None:
            raise _Ended(501, f"backend {transit.backend} batches its requests: it serves no gRPC calls")
        try:
            if pool is None:
                raise NoReplicaError(transit.backend)
            async with asyncio.timeout_at(deadline_at):
                slot = await pool.acquire()
        except (NoReplicaError, QueueFullError):
            raise _Ended.of(Refusal(503, "No replica available", app.retry_after)) from None
        except TimeoutError:
            raise _Ended(504, "Deadline Exceeded: no replica within the call's deadline") from None
        transit.seen(slot.replica_id)
        session_id = uuid.uuid4().hex
        replies = app.caller.open_websocket(slot.handle, session_id, transit.request)
        sent = _messages_flow(transit)  # a captured call's replies (its record's `stream`) and requests (`requests`)
        taken = None
        if transit.captured is not None:
            taken = transit.captured.client = Flow(transit.captured.redaction.max_body_bytes)
        oversized: list[int] = []  # the size of a request message over max_body_bytes, once the pump met one
        pump: asyncio.Task[None] | None = None
        died = False
        first = True
        try:
            while True:
                try:
                    message = await asyncio.wait_for(anext(replies), max(deadline_at - loop.time(), 0.0))
                except StopAsyncIteration:
                    _refuse_oversized(oversized, served.max_body_bytes)
                    return  # the session ended without a close: as a close with OK
                kind = message.get("type")
                if kind == "websocket.accept":
                    pump = asyncio.ensure_future(
                        self._pump(slot.handle, session_id, requests, served.max_body_bytes, oversized, taken))
                elif kind == "websocket.send":
                    _refuse_oversized(oversized, served.max_body_bytes)
                    if first:
                        app.recorder.first_byte(served.name, transit.backend, time.perf_counter() - transit.started)
                        first = False
                    reply = message.get("bytes") or b""
                    if sent is not None:
                        sent.add(reply)
                    yield reply
                elif kind == "websocket.close":
                    _refuse_oversized(oversized, served.max_body_bytes)
                    code = code_for_close(int(message.get("code") or STREAM_CLOSE_OK))
                    if code != grpc.StatusCode.OK.value[0]:
                        raise _Ended(status_for_code(code), str(message.get("reason") or ""), code=code)
                    return
        except TimeoutError:
            raise _Ended(504, "Deadline Exceeded: the call outlived its deadline") from None
        except ReplicaDiedError:
            died = True
            raise _Ended(502, "the replica died during the call") from None
        except HandlerError as error:
            logger.error("a streaming-request gRPC method raised:\n%s", error)
            raise _Ended(500, "the backend's method raised") from None
        finally:
            try:
                if pump is not None:
                    pump.cancel()
                    await asyncio.gather(pump, return_exceptions=True)
                await replies.aclose()  # stops the method if it still runs
            finally:
                # Released even when the call is cancelled during those awaits (its client gone as its deadline
                # passed): a slot kept would refuse every later call of a capped backend.
                pool.release(slot)
                if died:
                    pool.drop(slot)

    async def _pump(
        self, handle: ReplicaHandle, session_id: str, requests: AsyncIterator[bytes], max_bytes: int,
        oversized: list[int], taken: Flow | None = None,
    ) -> None:
        """The client's request messages to the replica's session, each once it has room for it, then the
        client's half-close; the replica holding no more session ends it. A message over `max_bytes` (the
        endpoint's max_body_bytes, as a unary call's one message) is not sent: the requests end there, as
        a half-close, and its size goes to `oversized`, so the call ends RESOURCE_EXHAUSTED at the
        replica's next reply or end. `taken`: where a captured call's request messages are counted, each
        as it is sent on."""
        caller = self._app.caller
        async for message in requests:
            if len(message) > max_bytes:
                oversized.append(len(message))
                break
            if taken is not None:
                taken.add(message)
            if not await caller.push(handle, session_id, {"type": "websocket.receive", "bytes": message}):
                return
        await caller.push(handle, session_id, {"type": "websocket.disconnect", "code": STREAM_CLOSE_OK})


def _refuse_oversized(oversized: list[int], max_bytes: int) -> None:
    """Ends a streaming-request call whose pump met a request message over `max_bytes`."""
    if oversized:
        raise _Ended(413, f"a request message of {oversized[0]} bytes is over the endpoint's "
                     f"max_body_bytes ({max_bytes})")


def _messages_flow(transit: Transit) -> Flow | None:
    """Where a captured call's streamed reply messages are counted (its record's `stream`); None uncaptured."""
    captured = transit.captured
    if captured is None:
        return None
    captured.stream = Flow(captured.redaction.max_body_bytes)
    return captured.stream


def _answered(transit: Transit, stages: Chain, status: int, trailers: list[tuple[bytes, bytes]], body: bytes) -> None:
    """The answered hooks, given the call's trailers as the answer's headers and the reply (or the refusal's
    text) as its body, read by the shadow comparison and capture; counting reads neither."""
    transit.duration_s = time.perf_counter() - transit.started
    sent = BodyView.one(body) if body and stages.reads_answers else EMPTY
    for hook in stages.answered:
        hook(transit, status, trailers, sent)


def _status_trailer(code: int) -> tuple[bytes, bytes]:
    return STATUS_HEADER, str(code).encode()


def _trailers(ended: _Ended) -> list[tuple[bytes, bytes]]:
    return [(name.encode("latin-1"), value.encode("latin-1")) for name, value in ended.trailers]


async def _end(context: grpc.aio.ServicerContext[Any, Any], ended: _Ended) -> None:
    if ended.trailers:
        context.set_trailing_metadata(ended.trailers)
    await context.abort(ended.code, ended.details)


def _headers(metadata: Sequence[tuple[str, str | bytes]]) -> list[tuple[bytes, bytes]]:
    """A call's metadata as the request's headers (a `-bin` key's value is bytes already)."""
    return [
        (key.encode("latin-1"), value if isinstance(value, bytes) else value.encode("latin-1"))
        for key, value in metadata
    ]


def _content_type(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    for name, value in headers:
        if name == b"content-type":
            return value
    return None


async def serve_grpc(
    app: ProxyApp, host: str, port: int, limits: GrpcLimits, shared: bool
) -> tuple[grpc.aio.Server, int]:
    """grpcio's server on `host:port` (0: a free port), started, routing every call through `app`, and
    the port it listens on; `shared`: the node's proxy workers share the port (SO_REUSEPORT), else a
    taken port is an error."""
    server = grpc.aio.server(
        handlers=[GrpcIngress(app, limits)],
        options=[
            ("grpc.max_receive_message_length", limits.max_message_bytes),
            ("grpc.max_send_message_length", limits.max_message_bytes),
            ("grpc.max_concurrent_streams", limits.max_concurrent_streams),
            ("grpc.max_metadata_size", limits.max_metadata_bytes),
            ("grpc.absolute_max_metadata_size", limits.max_metadata_bytes),
            ("grpc.so_reuseport", 1 if shared else 0),
            # The windows fixed at `flow_window_bytes` (`GrpcLimits`), not grown by bandwidth probes.
            ("grpc.http2.bdp_probe", 0),
            ("grpc.http2.lookahead_bytes", limits.flow_window_bytes),
        ],
        maximum_concurrent_rpcs=limits.max_concurrent_calls,
    )
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError as error:
        raise OSError(f"proxy cannot serve gRPC on {address}: {error}") from None
    if bound == 0:
        raise OSError(f"proxy cannot serve gRPC on {address}: the port is taken")
    await server.start()
    return server, bound
