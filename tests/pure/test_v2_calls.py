"""Several v2 models behind one gRPC port (`vocabulary.request_path.v2_calls`): the model a call's message
names, read off messages built by the v2 proto's generated classes (whatever their field order and
however large their tensors), a model's REST path as an endpoint's route, and the spec's rule that
lets several endpoints serve the v2 service only at their models' paths."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ray_gitops.v2.proto import grpc_predict_v2_pb2 as pb
from vocabulary.request_path.v2_calls import V2_SERVICE, model_named, model_of_route
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.serving_rules import Rule, taken_grpc_services


def test_the_model_each_model_method_names() -> None:
    infer = pb.ModelInferRequest(model_name="iris", model_version="3", id="r1")
    infer.inputs.add(name="x", datatype="FP32", shape=[1000, 4])
    infer.raw_input_contents.append(b"\x00" * 16_000)
    infer.parameters["tag"].string_param = "t"
    assert model_named(infer.SerializeToString()) == "iris"
    assert model_named(pb.ModelMetadataRequest(name="résumé", version="1").SerializeToString()) == "résumé"
    assert model_named(pb.ModelReadyRequest(name="b").SerializeToString()) == "b"


def test_the_name_is_found_whatever_the_fields_order() -> None:
    # Protobuf writes fields in their number's order, but a parser takes any: field 1 after the tensors.
    rest = pb.ModelInferRequest(id="r1", raw_input_contents=[b"\x01" * 300]).SerializeToString()
    name = pb.ModelInferRequest(model_name="late").SerializeToString()
    assert model_named(rest + name) == "late"
    assert pb.ModelInferRequest.FromString(rest + name).model_name == "late"  # as protobuf reads it
    # Written twice, the last one wins, as protobuf reads a scalar field.
    assert model_named(name + pb.ModelInferRequest(model_name="last").SerializeToString()) == "last"


@pytest.mark.parametrize("message", [
    b"",  # no field: the empty name (the replica answers NOT_FOUND)
    pb.ModelInferRequest(id="only an id").SerializeToString(),
    b"\x0a\x05ab",  # a name cut short
    b"\x0a\x02\xff\xfe",  # no UTF-8
    b"\xff" * 11,  # a varint past 10 bytes
    b"\x0b",  # a group, which no v2 message has
    b"not a protobuf at all",
])
def test_a_message_naming_no_model(message: bytes) -> None:
    assert not model_named(message)


@given(st.binary(max_size=200))
def test_any_bytes_name_a_model_or_none_without_raising(message: bytes) -> None:
    named = model_named(message)
    assert named is None or isinstance(named, str)


@pytest.mark.parametrize(("route", "model"), [
    ("/v2/models/iris", "iris"),
    ("/v2/models/iris/", "iris"),
    ("/v2/models/", None),
    ("/v2/models/iris/versions/1", None),  # a version's path is no model's route
    ("/v2", None),
    ("/iris", None),
])
def test_a_model_s_rest_path_as_a_route(route: str, model: str | None) -> None:
    assert model_of_route(route) == model


def _endpoint(name: str, route: str, service: str = V2_SERVICE) -> EndpointConfig:
    return EndpointConfig(name=name, route=route, traffic={"b": 1.0}, grpc_service=service)


def test_several_endpoints_serve_the_v2_service_at_their_models_paths_beside_one_other() -> None:
    endpoints = {
        "server": _endpoint("server", "/v2"),
        "iris": _endpoint("iris", "/v2/models/iris"),
        "adder": _endpoint("adder", "/v2/models/adder"),
    }
    assert taken_grpc_services(endpoints) == []
    assert taken_grpc_services({k: v for k, v in endpoints.items() if k != "server"}) == []


def test_two_v2_endpoints_not_at_model_paths_are_refused_with_the_way_out() -> None:
    endpoints = {"a": _endpoint("a", "/a"), "iris": _endpoint("iris", "/v2/models/iris"), "b": _endpoint("b", "/b")}
    (problem,) = taken_grpc_services(endpoints)
    assert (problem.rule, problem.path, problem.other) == (Rule.GRPC_SERVICE_TAKEN, ("endpoints", "b", "grpc_service"), "a")
    assert problem.message == (
        "endpoints.b.grpc_service: 'inference.GRPCInferenceService' is already served by endpoint 'a'; several "
        'endpoints serve it when all but one have the route of the model their calls name (route = "/v2/models/NAME")'
    )


def test_other_services_stay_one_endpoint_s_whatever_their_routes() -> None:
    endpoints = {"a": _endpoint("a", "/v2/models/a", "s.S"), "b": _endpoint("b", "/v2/models/b", "s.S")}
    assert [p.other for p in taken_grpc_services(endpoints)] == ["a"]
