"""A gRPC call as a wire request (`vocabulary.request_path.grpc_calls`): routing by service, the status
codes of the proxy's refusals, a streamed reply's framing found again however its chunks were cut,
and the spec's rules for `grpc_service` (its shape; one endpoint per service)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vocabulary.request_path import grpc_calls
from vocabulary.request_path.grpc_calls import (
    GRPC_HEADER, STATUS_HEADER, FramingError, Unframer, code_for_status, code_of, frame, grpc_call, is_grpc_call,
    method_of, service_of, status_for_code,
)
from vocabulary.request_path.wire import make_request
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.serving_rules import Rule, state_problems, taken_grpc_services


@pytest.mark.parametrize(("path", "service"), [
    ("/helloworld.Greeter/SayHello", "helloworld.Greeter"),
    ("/Greeter/SayHello", "Greeter"),
    ("/a.b.c.S/M", "a.b.c.S"),
    ("helloworld.Greeter/SayHello", None),  # no leading slash
    ("/helloworld.Greeter", None),  # no method
    ("/helloworld.Greeter/", None),
    ("//SayHello", None),
    ("/a/b/c", None),  # a method has no slash
])
def test_the_service_a_call_names(path: str, service: str | None) -> None:
    assert service_of(path) == service


def test_the_method_is_the_last_segment() -> None:
    assert method_of("/helloworld.Greeter/SayHello") == "SayHello"


@pytest.mark.parametrize(("status", "code"), [
    (200, grpc_calls.OK),
    (429, grpc_calls.RESOURCE_EXHAUSTED),  # a tenant over its rate
    (413, grpc_calls.RESOURCE_EXHAUSTED),  # a message over max_body_bytes
    (503, grpc_calls.UNAVAILABLE),  # no replica, queue full, circuit open
    (502, grpc_calls.UNAVAILABLE),  # the replica died
    (504, grpc_calls.DEADLINE_EXCEEDED),
    (501, grpc_calls.UNIMPLEMENTED),  # the backend has no such method
    (404, grpc_calls.UNIMPLEMENTED),
    (400, grpc_calls.INVALID_ARGUMENT),
    (500, grpc_calls.INTERNAL),  # the user's code raised
    (507, grpc_calls.INTERNAL),
    (418, grpc_calls.UNKNOWN),
])
def test_refusals_as_grpc_status_codes(status: int, code: int) -> None:
    assert code_for_status(status) == code


@pytest.mark.parametrize(("code", "status"), [
    (grpc_calls.INVALID_ARGUMENT, 400),  # a v2 tensor the metadata refuses
    (grpc_calls.NOT_FOUND, 404),  # a v2 model the endpoint does not serve
    (grpc_calls.UNAVAILABLE, 503),  # a v2 model not ready
    (grpc_calls.RESOURCE_EXHAUSTED, 429),
    (grpc_calls.UNIMPLEMENTED, 501),
    (grpc_calls.INTERNAL, 500),
    (grpc_calls.UNKNOWN, 500),  # unlisted
])
def test_a_methods_own_code_is_counted_as_its_http_twin_and_ends_the_call_as_itself(code: int, status: int) -> None:
    assert status_for_code(code) == status
    assert code_of(status, [(b"content-type", b"text/plain"), (STATUS_HEADER, str(code).encode())]) == code


@pytest.mark.parametrize("value", [b"0", b"17", b"-3", b"x", b""])
def test_a_status_header_that_is_no_error_code_leaves_the_http_statuss_code(value: bytes) -> None:
    assert code_of(404, [(STATUS_HEADER, value)]) == grpc_calls.UNIMPLEMENTED
    assert code_of(404, []) == grpc_calls.UNIMPLEMENTED


def test_a_call_crosses_marked_last_and_without_pseudo_headers() -> None:
    wire = grpc_call("/s.S/M", [(b"x-tenant", b"t"), (b":authority", b"h"), (GRPC_HEADER, b"forged")], b"msg")
    assert wire == ("POST", "/s.S/M", b"", [(b"x-tenant", b"t"), (GRPC_HEADER, b"")], b"msg")
    assert is_grpc_call(wire)
    assert not is_grpc_call(make_request("POST", "/s.S/M", headers=[(b"x-tenant", b"t")]))
    assert not is_grpc_call(make_request("GET", "/"))


@given(st.lists(st.binary(max_size=300), max_size=8), st.lists(st.integers(min_value=1, max_value=50), max_size=40))
def test_messages_are_found_again_however_the_stream_was_cut(messages: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(frame(message) for message in messages)
    unframer, found, start = Unframer(1000), [], 0
    for size in cuts:
        found += unframer.feed(stream[start : start + size])
        start += size
    found += unframer.feed(stream[start:])
    unframer.finish()
    assert found == messages


def test_a_message_over_the_limit_or_cut_short_is_a_framing_error() -> None:
    with pytest.raises(FramingError, match="over the limit"):
        Unframer(10).feed(frame(b"x" * 11))
    cut = Unframer(100)
    assert cut.feed(frame(b"hello")[:-1]) == []
    with pytest.raises(FramingError, match="ended inside a message"):
        cut.finish()


def endpoint(name: str, service: str | None) -> EndpointConfig:
    return EndpointConfig(name=name, route=f"/{name}", traffic={"b": 1.0}, grpc_service=service)


@pytest.mark.parametrize("service", ["helloworld.Greeter", "Greeter", "a.b_c.S1"])
def test_a_grpc_service_is_a_full_protobuf_name(service: str) -> None:
    assert endpoint("e", service).grpc_service == service


@pytest.mark.parametrize("service", ["", "pkg..S", ".S", "S.", "pkg/S", "1pkg.S", "pkg.S/M"])
def test_anything_else_is_refused(service: str) -> None:
    with pytest.raises(ValueError, match="not a gRPC service's full name"):
        endpoint("e", service)


def test_one_service_is_one_endpoints() -> None:
    endpoints = {"a": endpoint("a", "s.S"), "b": endpoint("b", "s.T"), "c": endpoint("c", "s.S"), "d": endpoint("d", None)}
    problems = taken_grpc_services(endpoints)
    assert [(p.rule, p.path, p.other) for p in problems] == [
        (Rule.GRPC_SERVICE_TAKEN, ("endpoints", "c", "grpc_service"), "a")
    ]
    assert problems[0].message == "endpoints.c.grpc_service: 's.S' is already served by endpoint 'a'"
    assert [p.rule for p in state_problems({"b": _Scaled()}, endpoints)] == [Rule.GRPC_SERVICE_TAKEN]


class _Scaled:
    name = "b"
    min_replicas = 1
    num_replicas = 1
    autoscaling = None
    cold_start_timeout_s = None


def test_grpc_abort_takes_a_status_code_or_its_number_and_never_ok() -> None:
    class StatusCode:  # the shape of grpc.StatusCode's members: value = (number, name)
        def __init__(self, number: int, name: str) -> None:
            self.value = (number, name)

    assert grpc_calls.GrpcAbort(StatusCode(5, "not found"), "gone").code == grpc_calls.NOT_FOUND
    assert grpc_calls.GrpcAbort(grpc_calls.INVALID_ARGUMENT, "bad").code == 3
    for wrong in (grpc_calls.OK, StatusCode(0, "ok"), 17, "NOT_FOUND"):
        with pytest.raises(ValueError, match="a gRPC status code other than OK"):
            grpc_calls.GrpcAbort(wrong, "no")
