"""Traces on the data path, in-process: the proxy's head sampling and request span
(the ASGI app with fake replicas), the replica's spans and the context its handle
calls carry; spans kept by the OpenTelemetry SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
import random

import httpx
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from proxy.app import ProxyApp
from proxy.observability.tracing import RequestTracing
from proxy.routes.subscriptions import Subscriptions
from proxy.settings import ProxySettings
from replica.tracing import ReplicaTracing
from tests.support.proxy_app import FakeCaller, FakeReplica, replica_set
from vocabulary.control.longpoll import RouteEntry, RouteTable
from vocabulary.request_path.wire import WireRequest, WireResponse
from vocabulary.spec.endpoints import EndpointConfig, MatchRule, TracingConfig

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
UNSAMPLED = f"00-{TRACE_ID}-00f067aa0ba902b7-00"


def _proxy(
    sample: float | None, exporter: InMemorySpanExporter, replica: FakeReplica, rollout_step: int = 0
) -> ProxyApp:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    rng = random.Random(0)
    app = ProxyApp(FakeCaller(), ProxySettings(), rng, tracing=RequestTracing(provider.get_tracer("t"), rng))
    subscriptions = Subscriptions(ProxySettings(), rng)
    tracing = None if sample is None else TracingConfig(sample=sample)
    config = EndpointConfig(
        name="echo", route="/echo", traffic={"v1": 1.0}, tracing=tracing, rollout_step=rollout_step
    )
    table = RouteTable(entries=(RouteEntry(route="/echo", methods=("GET", "POST"), endpoint="echo"),))
    replicas = replica_set("v1", [replica]).model_copy(update={"commit": "c0ffee"})
    app.install(subscriptions.apply({"routes": (1, table), "endpoint:echo": (2, config), "replicas:v1": (3, replicas)}))
    return app


async def _get(app: ProxyApp, headers: dict[str, str] | None = None) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
        return await client.get("/echo", headers=headers)


def _header(request: WireRequest, name: bytes) -> str | None:
    found = [value.decode() for header, value in request[3] if header == name]
    assert len(found) <= 1, found
    return found[0] if found else None


def test_a_sampled_traceparent_is_followed_and_the_replica_gets_the_proxy_span_as_parent() -> None:
    exporter, replica = InMemorySpanExporter(), FakeReplica("r1")
    app = _proxy(None, exporter, replica)  # no [tracing]: sample 0, but a sampled parent is always followed
    response = asyncio.run(_get(app, {"traceparent": PARENT, "tracestate": "vendor=1"}))
    assert response.status_code == 200
    (span,) = exporter.get_finished_spans()
    context = span.get_span_context()
    assert f"{context.trace_id:032x}" == TRACE_ID
    assert span.parent is not None and f"{span.parent.span_id:016x}" == "00f067aa0ba902b7"
    attributes = dict(span.attributes or {})
    assert attributes["gitops.endpoint"] == "echo"
    assert attributes["gitops.backend"] == "v1"
    assert attributes["gitops.replica"] == "r1"
    assert attributes["gitops.commit"] == "c0ffee"
    assert attributes["gitops.rollout_step"] == 0  # no rollout runs
    assert attributes["http.response.status_code"] == 200
    assert attributes["http.response.body.size"] == 2
    (seen,) = replica.seen
    assert _header(seen, b"traceparent") == f"00-{TRACE_ID}-{context.span_id:016x}-01"
    assert _header(seen, b"tracestate") == "vendor=1"
    assert "gitops.endpoint=echo" in (_header(seen, b"baggage") or "")


def test_the_span_says_which_rollout_step_s_weights_chose_the_backend() -> None:
    exporter = InMemorySpanExporter()
    app = _proxy(None, exporter, FakeReplica("r1"), rollout_step=2)  # the controller serves step 2's weights
    assert asyncio.run(_get(app, {"traceparent": PARENT})).status_code == 200
    (span,) = exporter.get_finished_spans()
    assert dict(span.attributes or {})["gitops.rollout_step"] == 2


def test_the_span_names_the_backend_a_json_match_rule_chose_from_the_body() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    rng = random.Random(0)
    app = ProxyApp(FakeCaller(), ProxySettings(), rng, tracing=RequestTracing(provider.get_tracer("t"), rng))
    config = EndpointConfig(name="echo", route="/echo", traffic={"v1": 1.0, "v2": 0.0},
                            match=[MatchRule(json_field="model", value="big", backend="v2")])
    table = RouteTable(entries=(RouteEntry(route="/echo", methods=("GET", "POST"), endpoint="echo"),))
    app.install(Subscriptions(ProxySettings(), rng).apply({
        "routes": (1, table), "endpoint:echo": (2, config),
        "replicas:v1": (3, replica_set("v1", [FakeReplica("r1")])), "replicas:v2": (4, replica_set("v2", [FakeReplica("r2")])),
    }))

    async def post() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
            return await client.post("/echo", content=b'{"model": "big"}', headers={"traceparent": PARENT})

    assert asyncio.run(post()).text == "r2"
    (span,) = exporter.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert (attributes["gitops.backend"], attributes["gitops.replica"]) == ("v2", "r2")


def test_without_a_sampled_parent_requests_are_traced_by_the_endpoints_share() -> None:
    exporter, replica = InMemorySpanExporter(), FakeReplica("r1")
    app = _proxy(0.25, exporter, replica)

    async def many() -> None:
        for _ in range(400):
            await _get(app, {"traceparent": UNSAMPLED})

    asyncio.run(many())
    spans = exporter.get_finished_spans()
    assert 60 <= len(spans) <= 140, len(spans)
    # A traced request starts a new trace (an unsampled parent is not continued).
    assert all(span.parent is None and f"{span.get_span_context().trace_id:032x}" != TRACE_ID for span in spans)
    traced = {_header(request, b"traceparent") for request in replica.seen} - {UNSAMPLED}
    assert len(traced) == len(spans)
    # An untraced request's headers pass as they came.
    assert sum(_header(request, b"traceparent") == UNSAMPLED for request in replica.seen) == 400 - len(spans)


def test_sample_zero_traces_nothing_without_a_sampled_parent() -> None:
    exporter, replica = InMemorySpanExporter(), FakeReplica("r1")
    app = _proxy(0.0, exporter, replica)
    for _ in range(20):
        assert asyncio.run(_get(app)).status_code == 200
    assert exporter.get_finished_spans() == ()
    assert all(_header(request, b"traceparent") is None for request in replica.seen)


def _replica_tracing(exporter: InMemorySpanExporter) -> ReplicaTracing:
    provider = ReplicaTracing.provider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return ReplicaTracing(provider, "v1", "r1", "c0ffee")


def _spans(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {span.name: span for span in exporter.get_finished_spans()}


def test_the_replica_follows_a_sampled_parent_and_its_handle_calls_carry_the_context() -> None:
    exporter = InMemorySpanExporter()
    tracing = _replica_tracing(exporter)
    carried: list[dict[str, str] | None] = []

    async def handler() -> WireResponse:
        with tracing.handle_call("sentiment", "sentiment-v2", "r9") as carrier:
            carried.append(carrier)
            return await tracing.called(carrier, lambda: asyncio.sleep(0, (200, [], b"ok")))

    headers = [(b"traceparent", PARENT.encode()), (b"baggage", b"gitops.endpoint=echo")]
    reply = asyncio.run(tracing.serve(("GET", "/echo", b"", headers, b""), handler))
    tracing.shutdown()
    assert reply[0] == 200
    spans = _spans(exporter)
    assert set(spans) == {"replica.request", "handle.call", "replica.call"}
    request, call, callee = spans["replica.request"], spans["handle.call"], spans["replica.call"]
    assert request.parent is not None and f"{request.parent.span_id:016x}" == "00f067aa0ba902b7"
    assert call.parent is not None and call.parent.span_id == request.get_span_context().span_id
    assert callee.parent is not None and callee.parent.span_id == call.get_span_context().span_id
    for span in spans.values():
        assert f"{span.get_span_context().trace_id:032x}" == TRACE_ID
        attributes = dict(span.attributes or {})
        assert (attributes["gitops.commit"], attributes["gitops.backend"], attributes["gitops.endpoint"]) == (
            "c0ffee", "v1", "echo"
        )
    assert dict(call.attributes or {})["gitops.handle.backend"] == "sentiment-v2"
    assert carried[0] is not None and carried[0]["traceparent"].endswith("-01")


def test_the_replica_records_nothing_for_an_unsampled_or_missing_parent() -> None:
    exporter = InMemorySpanExporter()
    tracing = _replica_tracing(exporter)
    carried: list[dict[str, str] | None] = []

    async def handler() -> WireResponse:
        with tracing.handle_call("other", "other", "r2") as carrier:
            carried.append(carrier)
        return 200, [], b"ok"

    for headers in ([(b"traceparent", UNSAMPLED.encode())], []):
        asyncio.run(tracing.serve(("GET", "/echo", b"", headers, b""), handler))
    asyncio.run(tracing.called(None, lambda: asyncio.sleep(0, None)))
    tracing.shutdown()
    assert exporter.get_finished_spans() == ()
    assert carried == [None, None]


def test_a_traced_websocket_spans_the_session_and_hands_its_context_to_the_replica() -> None:
    from proxy.pipeline.websockets import WebSocketCarrier
    from tests.support.websockets import Client, EchoReplica, Recorded, SocketCaller

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    rng = random.Random(0)
    carrier = WebSocketCarrier(SocketCaller(), rng, Recorded(), tracing=RequestTracing(provider.get_tracer("t"), rng))  # type: ignore[arg-type]  # a fake caller with the WebSocket calls only
    replica = EchoReplica()
    replicas = replica_set("v1", []).model_copy(update={
        "commit": "c0ffee", "replicas": (replica_set("v1", [FakeReplica("r1")]).replicas[0].model_copy(
            update={"handle": replica}),),
    })
    config = EndpointConfig(name="chat", route="/chat", methods=("GET",), traffic={"v1": 1.0})
    table = RouteTable(entries=(RouteEntry(route="/chat", methods=("GET",), endpoint="chat"),))
    snapshot = Subscriptions(ProxySettings(), rng).apply(
        {"routes": (1, table), "endpoint:chat": (2, config), "replicas:v1": (3, replicas)}
    )
    client = Client([{"type": "websocket.receive", "text": "a"}, {"type": "websocket.disconnect", "code": 1000}],
                    echoes=1)
    scope = {"type": "websocket", "path": "/chat", "raw_path": b"/chat", "query_string": b"",
             "headers": [(b"traceparent", PARENT.encode())]}
    asyncio.run(asyncio.wait_for(carrier.carry(snapshot, scope, client.receive, client.send), 5))
    (span,) = exporter.get_finished_spans()
    assert span.name == "proxy.websocket"
    attributes = dict(span.attributes or {})
    assert (attributes["gitops.replica"], attributes["gitops.commit"], attributes["http.response.status_code"]) == (
        "r1", "c0ffee", 101
    )
    (request,) = replica.requests
    assert _header(request, b"traceparent") == f"00-{TRACE_ID}-{span.get_span_context().span_id:016x}-01"


def test_a_grpc_call_follows_the_traceparent_of_its_metadata_and_hands_its_span_to_the_replica() -> None:
    import grpc.aio

    from proxy.grpc_ingress import serve_grpc
    from proxy.settings import GrpcLimits
    from vocabulary.request_path.deadlines import split_deadline
    from vocabulary.request_path.grpc_calls import is_grpc_call

    exporter, replica = InMemorySpanExporter(), FakeReplica("r1")
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    rng = random.Random(0)
    app = ProxyApp(FakeCaller(), ProxySettings(), rng, tracing=RequestTracing(provider.get_tracer("t"), rng))
    config = EndpointConfig(name="echo", route="/echo", traffic={"v1": 1.0}, grpc_service="demo.Echo")
    table = RouteTable(entries=(RouteEntry(route="/echo", methods=("GET", "POST"), endpoint="echo"),))
    replicas = replica_set("v1", [replica]).model_copy(update={"commit": "c0ffee"})
    app.install(Subscriptions(ProxySettings(), rng).apply(
        {"routes": (1, table), "endpoint:echo": (2, config), "replicas:v1": (3, replicas)}))

    async def call() -> bytes:
        server, port = await serve_grpc(app, "127.0.0.1", 0, GrpcLimits(), shared=False)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                say = channel.unary_unary("/demo.Echo/Say")
                return await say(b"hi", metadata=(("traceparent", PARENT),), timeout=10)  # type: ignore[no-any-return]
        finally:
            await server.stop(None)

    assert asyncio.run(call())
    (span,) = exporter.get_finished_spans()
    assert span.name == "proxy.request" and span.parent is not None and span.parent.span_id == int("00f067aa0ba902b7", 16)
    assert f"{span.context.trace_id:032x}" == TRACE_ID
    assert span.attributes is not None and span.attributes["url.path"] == "/demo.Echo/Say"
    assert span.attributes["gitops.endpoint"] == "echo" and span.attributes["http.response.status_code"] == 200
    (seen,) = replica.seen
    # The replica gets the proxy span as parent, and the call still reads as a gRPC call (its marker last
    # once the deadline the proxy adds is taken off, as the replica does).
    assert _header(seen, b"traceparent") == f"00-{TRACE_ID}-{span.context.span_id:016x}-01"
    assert is_grpc_call(split_deadline(seen)[0])
