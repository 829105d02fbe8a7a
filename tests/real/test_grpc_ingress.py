"""gRPC through the proxy end to end: the real controller and proxy with its gRPC port on 127.0.0.1,
real Ray replicas of a servicer class (tests/real/apps/grpc_greeters.py; the stack is
tests/support/grpc_ingress.py's), and a real grpcio client calling with raw bytes: unary and
server-streaming calls, a 90/10 split over 200 calls and its rollback, `grpc-timeout`, a tenant's
limit, an unknown service, an oversized message, a call's trace, a call's shadow copy and capture
record, client-streaming and bidirectional calls, and a backend naming its generated servicer
(`grpc_servicer`, tests/real/apps/greeter_servicer.py) called by grpcio's generated stub (hostile clients:
tests/security/test_grpc_hostile.py)."""

from __future__ import annotations

import collections
import json
import queue
import shutil
import sys
from pathlib import Path
from typing import Any

import grpc
import ray
import pytest

from gitops.specs.loading import Loader
from tests.support.grpc_ingress import SERVICE, Served, greeting, served  # noqa: F401 — `served` is a fixture
from tests.support.otlp import ReceivedSpan
from tests.support.stack import APPS, eventually, met, quick_backend, run
from vocabulary.spec.endpoints import CaptureConfig, LimitsConfig, ShadowCompare

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


def _records(sink: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sink.glob("*.jsonl") for line in path.read_text().splitlines()]


def test_a_call_is_shadowed_compared_and_captured_as_an_http_request_is(served: Served, tmp_path: Path) -> None:
    sink = tmp_path / "sink"
    capture = CaptureConfig(sample=1.0, sink=f"file://{sink}", redact=["header:x-tenant"])
    shadowed = greeting("greet", traffic={"a": 1.0}, shadow={"b": 1.0}, shadow_compare=ShadowCompare.EXACT,
                        capture=capture)
    met(served.client, run(served.client.apply_endpoint(shadowed)))
    try:
        metadata = (("x-api-key", "sk-live-grpc"), ("x-tenant", "ada"), ("x-note", "kept"))
        eventually(lambda: served.unary("SayHello", b"ada", metadata=metadata, timeout=30) == b"a: hello ada"
                   and _records(sink), 30, 0.3, what="a captured call on a (the applied endpoint)")
        assert served.streamed("Count", b"3") == [b"a 0", b"a 1", b"a 2"]  # the primary's alone, as they come
        records = eventually(lambda: (found := [r for r in _records(sink) if r["grpc"]["method"] == "Count"])
                             and found, 30, what="the streamed call's record")
    finally:
        met(served.client, run(served.client.apply_endpoint(greeting("greet", traffic={"a": 0.9, "b": 0.1}))))
    text = "".join(path.read_text() for path in sink.glob("*.jsonl"))
    assert "sk-live-grpc" not in text
    unary = next(r for r in _records(sink) if r["grpc"]["method"] == "SayHello")
    assert unary["kind"] == "grpc" and unary["grpc"] == {
        "service": SERVICE, "method": "SayHello", "code": 0, "code_name": "OK"}
    assert (unary["endpoint"], unary["backend"], unary["status"]) == ("greet", "a", 200)
    shown = dict(unary["request"]["headers"])
    assert (shown["x-api-key"], shown["x-tenant"], shown["x-note"]) == ("[redacted]", "[redacted]", "kept")
    assert unary["request"]["body"]["text"] == "ada" and unary["response"]["body"]["text"] == "a: hello ada"
    # The copy reached b's replica, which answered its own greeting; compared with a's: a mismatch.
    (copy,) = unary["shadows"]
    assert (copy["backend"], copy["result"], copy["body"]["text"]) == ("b", "ok", "b: hello ada")
    assert copy["compared"]["matched"] is False
    mismatches = ray.get(served.proxy.shadow_mismatches.remote(), timeout=30)
    assert any(m["endpoint"] == "greet" and m["path"] == f"/{SERVICE}/SayHello" for m in mismatches), mismatches
    (streamed,) = records
    assert streamed["stream"]["messages"] == 3 and [m["text"] for m in streamed["stream"]["first"]] == [
        "a 0", "a 1", "a 2"]
    assert streamed["shadows"][0]["result"] == "ok" and "compared" not in streamed["shadows"][0]  # never compared


def test_client_streaming_and_bidirectional_calls_reach_the_methods_listed_in_grpc_streaming(served: Served) -> None:
    streaming = greeting("greet", traffic={"a": 1.0}, grpc_streaming=("Sum", "Chat"))
    met(served.client, run(served.client.apply_endpoint(streaming)))
    try:
        total = served.channel.stream_unary(f"/{SERVICE}/Sum")
        eventually(lambda: total(iter([b"1", b"2", b"39"]), timeout=30) == b"a: 42", 30, 0.3,
                   what="Sum taking a stream once the endpoint lists it", retry_on=(grpc.RpcError,))
        requests: queue.Queue[bytes | None] = queue.Queue()
        replies = served.channel.stream_stream(f"/{SERVICE}/Chat")(iter(requests.get, None), timeout=30)
        for word in ("ada", "bob", "cy"):  # each reply read before the next request is sent
            requests.put(word.encode())
            assert next(replies) == f"a heard {word}".encode()
        requests.put(None)
        assert list(replies) == [] and replies.code() == grpc.StatusCode.OK
        assert served.unary("SayHello", b"x", timeout=30) == b"a: hello x"  # unlisted: unary as before
    finally:
        met(served.client, run(served.client.apply_endpoint(greeting("greet", traffic={"a": 0.9, "b": 0.1}))))


SERVICER_SPEC = """\
[backends.hello]
import_path = "greeter_servicer:Greeter"
init_args = ["v1"]
grpc_servicer = "helloworld_pb2_grpc:add_GreeterServicer_to_server"

[endpoints.hello]
route = "/hello"
traffic = { hello = 1.0 }
"""


def test_a_backend_naming_its_generated_servicer_serves_grpcio_stubs_with_no_grpc_streaming(
    served: Served, tmp_path: Path
) -> None:
    for name in ("greeter_servicer.py", "helloworld_pb2.py", "helloworld_pb2_grpc.py"):
        shutil.copy(Path(APPS) / name, tmp_path / name)
    (tmp_path / "deployments").mkdir()
    (tmp_path / "deployments" / "hello.toml").write_text(SERVICER_SPEC)
    loaded = Loader().load_directory(tmp_path / "deployments", root=tmp_path)  # the agent's spec check
    assert loaded.state is not None, [str(error) for error in loaded.errors]
    backend, endpoint = loaded.state.backends["hello"], loaded.state.endpoints["hello"]
    assert endpoint.grpc_service == "helloworld.Greeter" and endpoint.grpc_streaming == ()
    client = served.client
    met(client, run(client.apply_backend(quick_backend(
        "hello", backend.import_path, init_args=backend.init_args, grpc_servicer=backend.grpc_servicer,
        version=backend.version,
    ))))
    met(client, run(client.apply_endpoint(endpoint)))
    sys.path.insert(0, APPS)
    try:
        import helloworld_pb2
        import helloworld_pb2_grpc

        stub = helloworld_pb2_grpc.GreeterStub(served.channel)
        reply = eventually(
            lambda: stub.SayHello(helloworld_pb2.HelloRequest(name="ada"), timeout=30, metadata=(("tenant", "acme"),)),
            30, 0.3, what="the servicer's SayHello through the proxy", retry_on=(grpc.RpcError,),
        )
        assert reply.message == "v1: hello ada (for acme)"
        names = iter([helloworld_pb2.HelloRequest(name=name) for name in ("ada", "bob", "cy")])
        assert stub.Sum(names, timeout=30).message == "v1: 3 names, ada bob cy"  # client streaming, not listed
        assert [reply.message for reply in stub.SayHellos(helloworld_pb2.HelloRequest(name="z"), timeout=30)] == [
            "v1: hello #0 z", "v1: hello #1 z", "v1: hello #2 z"]
        with pytest.raises(grpc.RpcError) as aborted:
            stub.SayHello(helloworld_pb2.HelloRequest(name=""), timeout=30)
        assert aborted.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
        assert aborted.value.details() == "a name, please"  # type: ignore[attr-defined]
        with pytest.raises(grpc.RpcError) as unimplemented:  # Chat: the generated class's stub
            list(stub.Chat(iter([helloworld_pb2.HelloRequest(name="x")]), timeout=30))
        assert unimplemented.value.code() == grpc.StatusCode.UNIMPLEMENTED  # type: ignore[attr-defined]
    finally:
        sys.path.remove(APPS)
        met(client, run(client.delete_endpoint("hello")))
        met(client, run(client.delete_backend("hello")))
