"""`[endpoints.X] grpc_service` as a spec file writes it: into the endpoint's config, or refused
with FILE:LINE:COL (not a full name; a service another endpoint already serves)."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.state.endpoint_state import EndpointState
from gitops.specs.loading import Loader
from vocabulary.spec.endpoints import EndpointConfig

SPEC = """\
[backends.greeter]
import_path = "apps.greeter:Greeter"

[endpoints.greet]
route = "/greet"
traffic = {{ greeter = 1.0 }}
grpc_service = "{first}"

[endpoints.hello]
route = "/hello"
traffic = {{ greeter = 1.0 }}
grpc_service = "{second}"
"""
APP = "class Greeter:\n    def __call__(self, request): ...\n    def SayHello(self, request): ...\n"


def load(tmp_path: Path, first: str, second: str):
    (tmp_path / "deployments").mkdir(exist_ok=True)
    (tmp_path / "deployments" / "greeter.toml").write_text(SPEC.format(first=first, second=second))
    (tmp_path / "apps").mkdir(exist_ok=True)
    (tmp_path / "apps" / "greeter.py").write_text(APP)
    return Loader().load_directory(tmp_path / "deployments", root=tmp_path)


def test_the_service_reaches_the_endpoint_config(tmp_path: Path) -> None:
    result = load(tmp_path, "helloworld.Greeter", "helloworld.Hello")
    assert result.state is not None, [str(error) for error in result.errors]
    assert result.state.endpoints["greet"].grpc_service == "helloworld.Greeter"
    assert result.state.endpoints["hello"].grpc_service == "helloworld.Hello"


def test_a_name_that_is_not_a_full_name_is_refused_where_it_is_written(tmp_path: Path) -> None:
    result = load(tmp_path, "helloworld/Greeter", "helloworld.Hello")
    assert [str(error) for error in result.errors] == [
        "deployments/greeter.toml:7:1: endpoints.greet.grpc_service: 'helloworld/Greeter' is not a gRPC "
        "service's full name: dot-separated identifiers, as in 'helloworld.Greeter'"
    ]


def test_a_service_served_twice_is_refused_naming_the_first(tmp_path: Path) -> None:
    result = load(tmp_path, "helloworld.Greeter", "helloworld.Greeter")
    assert [str(error) for error in result.errors] == [
        "deployments/greeter.toml:12:1: endpoints.hello.grpc_service: 'helloworld.Greeter' is already served "
        "by endpoint 'greet' (deployments/greeter.toml:7:1)"
    ]


def test_the_controller_refuses_a_service_another_endpoint_serves() -> None:
    greet = EndpointConfig(name="greet", route="/greet", traffic={"g": 1.0}, grpc_service="helloworld.Greeter")
    state = EndpointState({"greet": greet})
    hello = greet.model_copy(update={"name": "hello", "route": "/hello"})
    with pytest.raises(ValueError, match="gRPC service helloworld.Greeter is already served by endpoint 'greet'"):
        state.validate(hello, {"g"})
    state.validate(hello.model_copy(update={"grpc_service": "helloworld.Hello"}), {"g"})


V2_SPEC = """\
[backends.greeter]
import_path = "apps.greeter:Greeter"

[endpoints.iris]
route = "{first}"
traffic = {{ greeter = 1.0 }}
grpc_service = "inference.GRPCInferenceService"

[endpoints.adder]
route = "{second}"
traffic = {{ greeter = 1.0 }}
grpc_service = "inference.GRPCInferenceService"
"""


def load_v2(tmp_path: Path, first: str, second: str):
    load(tmp_path, "a.A", "b.B")
    (tmp_path / "deployments" / "greeter.toml").write_text(V2_SPEC.format(first=first, second=second))
    return Loader().load_directory(tmp_path / "deployments", root=tmp_path)


def test_the_v2_service_at_each_model_s_path_is_served_by_several_endpoints(tmp_path: Path) -> None:
    for first in ("/v2/models/iris", "/v2"):
        result = load_v2(tmp_path, first, "/v2/models/adder")
        assert result.state is not None, [str(error) for error in result.errors]


def test_two_v2_endpoints_that_are_not_at_models_paths_are_refused_where_written(tmp_path: Path) -> None:
    result = load_v2(tmp_path, "/v2", "/adder")
    assert [str(error) for error in result.errors] == [
        "deployments/greeter.toml:12:1: endpoints.adder.grpc_service: 'inference.GRPCInferenceService' is already "
        "served by endpoint 'iris'; several endpoints serve it when all but one have the route of the model their "
        'calls name (route = "/v2/models/NAME") (deployments/greeter.toml:7:1)'
    ]


def test_grpc_streaming_without_a_service_or_naming_a_method_twice_is_refused_where_it_is_written(
    tmp_path: Path,
) -> None:
    (tmp_path / "deployments").mkdir()
    (tmp_path / "deployments" / "chat.toml").write_text(
        '[backends.greeter]\nimport_path = "apps.greeter:Greeter"\n\n'
        '[endpoints.chat]\nroute = "/chat"\ntraffic = { greeter = 1.0 }\ngrpc_streaming = ["Chat"]\n\n'
        '[endpoints.talk]\nroute = "/talk"\ntraffic = { greeter = 1.0 }\ngrpc_service = "demo.Talk"\n'
        'grpc_streaming = ["Chat", "Sum", "Chat"]\n'
    )
    (tmp_path / "apps").mkdir()
    (tmp_path / "apps" / "greeter.py").write_text(APP)
    errors = [str(error) for error in Loader().load_directory(tmp_path / "deployments", root=tmp_path).errors]
    assert len(errors) == 2, errors
    assert errors[0].startswith("deployments/chat.toml:4:") and "endpoints.chat" in errors[0], errors
    assert "grpc_streaming names methods of the endpoint's gRPC service, and it has none" in errors[0], errors
    assert errors[1].startswith("deployments/chat.toml:9:") and "endpoints.talk" in errors[1], errors
    assert "grpc_streaming names 'Chat' twice" in errors[1], errors
    with pytest.raises(ValueError, match="it has none"):  # the controller's own config keeps the rule
        EndpointConfig(name="e", route="/e", traffic={"b": 1.0}, grpc_streaming=("Chat",))
