"""gRPC through the proxy end to end: the real controller and proxy with its gRPC port on 127.0.0.1,
real Ray replicas of a servicer class (tests/real/apps/grpc_greeters.py; the stack is
tests/support/grpc_ingress.py's), and a real grpcio client calling with raw bytes: unary and
server-streaming calls, a 90/10 split over 200 calls and its rollback, `grpc-timeout`, a tenant's
limit, an unknown service, an oversized message, and a call's trace (hostile clients:
tests/security/test_grpc_hostile.py)."""

from __future__ import annotations

import collections

import grpc
import pytest

from tests.support.grpc_ingress import SERVICE, Served, greeting, served  # noqa: F401 — `served` is a fixture
from tests.support.otlp import ReceivedSpan
from tests.support.stack import eventually, met, run
from vocabulary.spec.endpoints import LimitsConfig

pytestmark = pytest.mark.real


def test_a_unary_call_through_the_proxy(served: Served) -> None:
    answer = served.unary("SayHello", b"ada", timeout=30)
    assert answer in (b"a: hello ada", b"b: hello ada")


def test_a_server_streaming_call_relays_each_message(served: Served) -> None:
    messages = served.streamed("Count", b"4")
    backend = messages[0].split()[0]
    assert messages == [backend + f" {n}".encode() for n in range(4)]


def test_a_90_10_split_then_its_rollback(served: Served) -> None:
    seen = collections.Counter(served.unary("SayHello", b"x", timeout=30).split(b":")[0] for _ in range(200))
    assert seen.keys() == {b"a", b"b"} and 160 <= seen[b"a"] <= 196, seen  # 180 expected; ±~4 sigma
    met(served.client, run(served.client.apply_endpoint(greeting("greet", traffic={"a": 1.0, "b": 0.0}))))
    after = eventually(
        lambda: all(served.unary("SayHello", b"x", timeout=30).startswith(b"a:") for _ in range(50)), 30,
        what="every call on a once the split is rolled back",
    )
    assert after
    met(served.client, run(served.client.apply_endpoint(greeting("greet", traffic={"a": 0.9, "b": 0.1}))))


def test_grpc_timeout_is_honoured(served: Served) -> None:
    with pytest.raises(grpc.RpcError) as late:
        served.unary("Slow", b"5", timeout=0.5)
    assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED  # type: ignore[attr-defined]


def test_unknown_service_and_method_are_unimplemented(served: Served) -> None:
    for service, method in (("demo.Nobody", "SayHello"), (SERVICE, "Missing")):
        with pytest.raises(grpc.RpcError) as refused:
            served.unary(method, b"x", service=service, timeout=30)
        assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED  # type: ignore[attr-defined]


def test_an_oversized_message_is_refused(served: Served) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        served.unary("SayHello", b"x" * (5 * 1024 * 1024), timeout=30)  # over the port's 4 MiB
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]


def test_a_tenant_over_its_limit_is_resource_exhausted(served: Served) -> None:
    limits = LimitsConfig(requests_per_s=0.001, burst=3, key="header:x-tenant")
    met(served.client, run(served.client.apply_endpoint(greeting("greet", traffic={"a": 0.9, "b": 0.1}, limits=limits))))
    try:
        ada = (("x-tenant", "ada"),)
        codes = []
        for _ in range(5):
            try:
                served.unary("SayHello", b"x", metadata=ada, timeout=30)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as error:
                codes.append(error.code())  # type: ignore[attr-defined]
        assert codes == [grpc.StatusCode.OK] * 3 + [grpc.StatusCode.RESOURCE_EXHAUSTED] * 2
    finally:
        met(served.client, run(served.client.apply_endpoint(greeting("greet", traffic={"a": 0.9, "b": 0.1}))))


TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


def test_a_call_with_a_sampled_traceparent_yields_the_proxy_and_replica_spans_of_an_http_request(
    served: Served,
) -> None:
    traceparent = (("traceparent", f"00-{TRACE_ID}-{CLIENT_SPAN}-01"),)
    answer = served.unary("SayHello", b"traced", metadata=traceparent, timeout=30)
    backend = answer.split(b":")[0].decode()

    def in_trace(spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
        return [span for span in spans if span.trace_id == TRACE_ID]

    spans = in_trace(served.spans.wait_for_spans(lambda found: len(in_trace(found)) >= 2))
    assert sorted(span.name for span in spans) == ["proxy.request", "replica.request"], spans
    (proxy,) = [span for span in spans if span.name == "proxy.request"]
    (replica,) = [span for span in spans if span.name == "replica.request"]
    assert proxy.service == "gitops-proxy" and proxy.parent_span_id == CLIENT_SPAN
    assert proxy.attributes["gitops.endpoint"] == "greet" and proxy.attributes["gitops.backend"] == backend
    assert proxy.attributes["url.path"] == f"/{SERVICE}/SayHello"
    assert proxy.attributes["http.response.status_code"] == 200
    assert replica.service == "gitops-replica" and replica.parent_span_id == proxy.span_id
    assert replica.attributes["gitops.backend"] == backend
