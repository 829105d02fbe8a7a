"""`[endpoints.X] grpc_service` as a spec file writes it: into the endpoint's config, or refused
with FILE:LINE:COL (not a full name; a service another endpoint already serves)."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.state.endpoint_state import EndpointState
from gitops.specs.loading import Loader
from vocabulary.spec.endpoints import EndpointConfig, GrpcMethodKind

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


GENERATED = (Path(__file__).resolve().parents[1] / "real" / "apps" / "helloworld_pb2_grpc.py").read_text()
SERVICER_SPEC = """\
[backends.v1]
import_path = "apps.greeter:{cls}"
grpc_servicer = "{servicer}"

[backends.v2]
import_path = "apps.greeter:Greeter"
grpc_servicer = "apps.helloworld_pb2_grpc:add_GreeterServicer_to_server"

[endpoints.greet]
route = "/greet"
traffic = {{ v1 = 0.9, v2 = 0.1 }}
{extra}
"""
SERVICER_APP = """\
import apps.helloworld_pb2_grpc as generated

class Greeter(generated.GreeterServicer):
    def __call__(self, request): ...

class Partial:
    def __call__(self, request): ...
    def SayHello(self, request, context): ...

def handle(request): ...

def add_OtherServicer_to_server(servicer, server):
    handlers = {"Ping": grpc.unary_unary_rpc_method_handler(servicer.Ping)}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("other.Pinger", handlers),))
"""


def load_servicer(tmp_path: Path, servicer: str = "apps.helloworld_pb2_grpc:add_GreeterServicer_to_server",
                  cls: str = "Greeter", extra: str = ""):
    (tmp_path / "deployments").mkdir(exist_ok=True)
    (tmp_path / "deployments" / "greeter.toml").write_text(SERVICER_SPEC.format(servicer=servicer, cls=cls, extra=extra))
    (tmp_path / "apps").mkdir(exist_ok=True)
    (tmp_path / "apps" / "greeter.py").write_text(SERVICER_APP)
    (tmp_path / "apps" / "helloworld_pb2_grpc.py").write_text(GENERATED)
    return Loader().load_directory(tmp_path / "deployments", root=tmp_path)


@pytest.mark.parametrize("servicer", ["apps.helloworld_pb2_grpc:add_GreeterServicer_to_server",
                                      "apps.helloworld_pb2_grpc:GreeterServicer"])
def test_a_servicer_gives_the_endpoint_its_service_and_method_kinds_with_no_grpc_streaming(
    tmp_path: Path, servicer: str
) -> None:
    result = load_servicer(tmp_path, servicer)
    assert result.state is not None, [str(error) for error in result.errors]
    greet = result.state.endpoints["greet"]
    assert greet.grpc_service == "helloworld.Greeter" and greet.grpc_streaming == ()
    assert greet.grpc_methods == {"SayHello": GrpcMethodKind.UNARY_UNARY, "SayHellos": GrpcMethodKind.UNARY_STREAM,
                                  "Sum": GrpcMethodKind.STREAM_UNARY, "Chat": GrpcMethodKind.STREAM_STREAM}
    assert greet.streaming_requests() == {"Sum", "Chat"}
    assert result.state.backends["v1"].grpc_servicer == servicer


def test_a_written_grpc_service_that_agrees_with_the_servicer_is_kept(tmp_path: Path) -> None:
    result = load_servicer(tmp_path, extra='grpc_service = "helloworld.Greeter"\ngrpc_streaming = ["Sum"]')
    assert result.state is not None, [str(error) for error in result.errors]
    assert result.state.endpoints["greet"].grpc_service == "helloworld.Greeter"


def test_a_servicer_changes_the_backend_s_version(tmp_path: Path) -> None:
    with_servicer = load_servicer(tmp_path)
    assert with_servicer.state is not None
    (tmp_path / "deployments" / "greeter.toml").write_text(
        '[backends.v1]\nimport_path = "apps.greeter:Greeter"\n\n'
        '[endpoints.greet]\nroute = "/greet"\ntraffic = { v1 = 1.0 }\n'
    )
    without = Loader().load_directory(tmp_path / "deployments", root=tmp_path)
    assert without.state is not None
    assert without.state.backends["v1"].version != with_servicer.state.backends["v1"].version


@pytest.mark.parametrize(("servicer", "cls", "extra", "expected"), [
    ("apps.helloworld_pb2_grpc", "Greeter", "",
     "deployments/greeter.toml:3:1: backends.v1.grpc_servicer: must look like "
     "'package.module:add_FooServicer_to_server' (the function generated in a *_pb2_grpc.py module), "
     "got 'apps.helloworld_pb2_grpc'"),
    ("apps.nowhere_pb2_grpc:add_GreeterServicer_to_server", "Greeter", "",
     "deployments/greeter.toml:3:1: backends.v1.grpc_servicer: module 'apps.nowhere_pb2_grpc' not found "
     "(no apps/nowhere_pb2_grpc/__init__.py or apps/nowhere_pb2_grpc.py)"),
    ("apps.greeter:handle", "Greeter", "",
     "deployments/greeter.toml:3:1: backends.v1.grpc_servicer: 'handle' in apps/greeter.py is not an "
     "add_…_to_server function as protoc's gRPC plugin generates it: it registers no "
     "grpc.method_handlers_generic_handler('package.Service', {'Method': grpc.unary_unary_rpc_method_handler(...), "
     "...})"),
    ("apps.greeter:generated", "Greeter", "",
     "deployments/greeter.toml:3:1: backends.v1.grpc_servicer: 'generated' in apps/greeter.py is not a function: "
     "name the add_…_to_server function protoc's gRPC plugin generates in a *_pb2_grpc.py module"),
    ("apps.helloworld_pb2_grpc:add_GreeterServicer_to_server", "Partial", "",
     "deployments/greeter.toml:3:1: backends.v1.grpc_servicer: class 'Partial' has no method 'SayHellos' of "
     "helloworld.Greeter (define it, or subclass the generated servicer class, whose methods answer UNIMPLEMENTED)"),
    ("apps.helloworld_pb2_grpc:add_GreeterServicer_to_server", "handle", "",
     "deployments/greeter.toml:3:1: backends.v1.grpc_servicer: 'handle' is a function; a servicer is a class "
     "implementing the service's methods"),
    ("apps.helloworld_pb2_grpc:add_GreeterServicer_to_server", "Greeter", 'grpc_service = "demo.Greeter"',
     "deployments/greeter.toml:12:1: endpoints.greet.grpc_service: 'demo.Greeter' is not the service backend 'v1' "
     "serves: its grpc_servicer registers helloworld.Greeter (deployments/greeter.toml:3:1); drop grpc_service or "
     "make them agree"),
    ("apps.helloworld_pb2_grpc:add_GreeterServicer_to_server", "Greeter",
     'grpc_service = "helloworld.Greeter"\ngrpc_streaming = ["Sum", "SayHello"]',
     "deployments/greeter.toml:13:1: endpoints.greet.grpc_streaming: names 'SayHello', and helloworld.Greeter "
     "(backend 'v1''s grpc_servicer) declares it unary_unary: its requests do not stream; a servicer's methods "
     "need no grpc_streaming"),
    ("apps.helloworld_pb2_grpc:add_GreeterServicer_to_server", "Greeter",
     'grpc_service = "helloworld.Greeter"\ngrpc_streaming = ["Upload"]',
     "deployments/greeter.toml:13:1: endpoints.greet.grpc_streaming: names 'Upload', and helloworld.Greeter "
     "(backend 'v1''s grpc_servicer) does not declare it; a servicer's methods need no grpc_streaming"),
    ("apps.greeter:add_OtherServicer_to_server", "Greeter", "",
     "deployments/greeter.toml:9:1: endpoints.greet: its backends' servicers serve different services: "
     "'v1' other.Pinger (deployments/greeter.toml:3:1), 'v2' helloworld.Greeter (deployments/greeter.toml:7:1)"),
])
def test_a_servicer_that_cannot_serve_is_refused_where_it_is_written(
    tmp_path: Path, servicer: str, cls: str, extra: str, expected: str
) -> None:
    result = load_servicer(tmp_path, servicer, cls, extra)
    assert result.state is None
    assert [str(error) for error in result.errors] == [expected]


def test_a_service_two_endpoints_serve_by_their_servicers_is_refused_naming_the_first(tmp_path: Path) -> None:
    extra = '\n[endpoints.hello]\nroute = "/hello"\ntraffic = { v2 = 1.0 }\n'
    result = load_servicer(tmp_path, extra=extra)
    assert [str(error) for error in result.errors] == [
        "deployments/greeter.toml:13:1: endpoints.hello: its backends' servicers serve helloworld.Greeter, already "
        "served by endpoint 'greet' (deployments/greeter.toml:9:1)"
    ]
