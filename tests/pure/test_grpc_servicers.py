"""A backend's generated gRPC servicer: what the agent reads of an add_…_to_server function without
importing it (`gitops.specs.servicers`), and what the replica records by calling it on a stand-in
server (`replica.calling.servicers`): the service's full name and each method's kind, the same from
both, for the generated module of deployments/apps/helloworld.proto in tests/real/apps; and the context a method gets."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import grpc
import pytest

from gitops.specs.servicers import missing_methods, resolve_servicer
from ray_gitops.registry import begin_deadline, end_deadline
from replica.calling.servicers import RecordingServer, ServicerContext, load_servicer, record_servicer
from vocabulary.request_path.deadlines import Deadline
from vocabulary.request_path.grpc_calls import INVALID_ARGUMENT, UNIMPLEMENTED, GrpcAbort
from vocabulary.spec.endpoints import GrpcMethodKind

APPS = Path(__file__).resolve().parents[1] / "real" / "apps"
GENERATED = (APPS / "helloworld_pb2_grpc.py").read_text()
KINDS = (
    ("SayHello", GrpcMethodKind.UNARY_UNARY),
    ("SayHellos", GrpcMethodKind.UNARY_STREAM),
    ("Sum", GrpcMethodKind.STREAM_UNARY),
    ("Chat", GrpcMethodKind.STREAM_STREAM),
)


class FileTree:
    """The few reads `gitops.specs.servicers` makes of a tree, over a dict of files."""

    def __init__(self, files: dict[str, str]) -> None:
        self._files = files

    def exists(self, path: str) -> bool:
        return path in self._files

    def is_dir(self, path: str) -> bool:
        return False

    def read(self, path: str) -> bytes:
        return self._files[path].encode()


@pytest.fixture(scope="module")
def generated() -> Iterator[Any]:
    sys.path.insert(0, str(APPS))
    try:
        import helloworld_pb2_grpc

        yield helloworld_pb2_grpc
    finally:
        sys.path.remove(str(APPS))


@pytest.mark.parametrize("attribute", ["add_GreeterServicer_to_server", "GreeterServicer"])
def test_the_agent_reads_the_service_and_its_kinds_from_the_generated_function(attribute: str) -> None:
    resolved = resolve_servicer(FileTree({"pkg/greeter_pb2_grpc.py": GENERATED}), f"pkg.greeter_pb2_grpc:{attribute}")
    assert resolved.error is None
    assert (resolved.module_file, resolved.service, resolved.methods) == ("pkg/greeter_pb2_grpc.py",
                                                                          "helloworld.Greeter", KINDS)


def test_the_replica_records_the_same_by_calling_it(generated: Any) -> None:
    class Greeter:
        async def SayHello(self, request: Any, context: Any) -> Any: ...  # noqa: N802
        def SayHellos(self, request: Any) -> Any: ...  # noqa: N802 — Serve's style: no context
        async def Sum(self, requests: Any, context: Any) -> Any: ...  # noqa: N802
        async def Chat(self, requests: Any, context: Any) -> Any: ...  # noqa: N802

    greeter = Greeter()
    for path in ("helloworld_pb2_grpc:add_GreeterServicer_to_server", "helloworld_pb2_grpc:GreeterServicer"):
        servicer = load_servicer(path, greeter)
        assert servicer.service == "helloworld.Greeter"
        assert tuple((name, method.kind) for name, method in servicer.methods.items()) == KINDS
        assert servicer.methods["SayHello"].behavior == greeter.SayHello
        assert servicer.methods["SayHello"].deserialize is not None and servicer.methods["SayHello"].takes_context
        assert not servicer.methods["SayHellos"].takes_context


def test_the_recording_reads_an_older_generated_function_that_only_adds_a_generic_handler() -> None:
    def add_old_to_server(servicer: Any, server: Any) -> None:  # grpcio < 1.63's generated code
        handlers = {"Ping": grpc.unary_stream_rpc_method_handler(servicer.Ping)}
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("old.Pinger", handlers),))

    servicer = record_servicer(add_old_to_server, SimpleNamespace(Ping=lambda request: None))
    assert servicer.service == "old.Pinger" and servicer.methods["Ping"].kind is GrpcMethodKind.UNARY_STREAM


def test_a_function_that_registers_nothing_is_no_servicer() -> None:
    with pytest.raises(TypeError, match="registered no service"):
        record_servicer(lambda servicer, server: None, object())
    assert RecordingServer().service is None


@pytest.mark.parametrize(("source", "attribute", "error"), [
    ("x = 1\n", "x", "'x' in m.py is not a function"),
    ("def add_X_to_server(servicer, server):\n    pass\n", "add_X_to_server", "it registers no grpc.method_handlers"),
    ("", "missing", "'missing' is not defined at module level in m.py"),
    ("class Servicer:\n    pass\n", "Servicer", "defines no add_Servicer_to_server function"),
    ("def add(servicer, server):\n    handlers = {'M': grpc.unary_unary_rpc_method_handler(servicer.M)}\n"
     "    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler('a/b', handlers),))\n",
     "add", "registers 'a/b' is not a gRPC service's full name"),
    ("def broken(:\n", "broken", "m.py:1: cannot parse"),
])
def test_what_is_not_a_generated_add_function_is_refused_with_why(source: str, attribute: str, error: str) -> None:
    resolved = resolve_servicer(FileTree({"m.py": source}), f"m:{attribute}")
    assert resolved.service is None and resolved.error is not None and error in resolved.error


def test_the_methods_a_class_lacks_are_named_in_the_services_order() -> None:
    resolved = resolve_servicer(FileTree({"g.py": GENERATED}), "g:add_GreeterServicer_to_server")
    assert missing_methods(resolved, frozenset({"SayHello", "Sum"})) == ["SayHellos", "Chat"]


def test_the_context_gives_metadata_abort_codes_and_time() -> None:
    context = ServicerContext([(b"tenant", b"acme"), (b"trace-bin", b"\x00\x01"), (b":grpc", b"1")])
    assert context.invocation_metadata() == (("tenant", "acme"), ("trace-bin", b"\x00\x01"))
    assert context.invocation_metadata()[0].key == "tenant" and context.invocation_metadata()[0].value == "acme"
    with pytest.raises(GrpcAbort) as aborted:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "a name, please")
    assert (aborted.value.code, aborted.value.details) == (INVALID_ARGUMENT, "a name, please")
    assert context.ended() is None and context.time_remaining() is None and context.is_active()
    context.set_code(grpc.StatusCode.OK)
    assert context.ended() is None
    context.set_code(grpc.StatusCode.UNIMPLEMENTED)
    context.set_details("Method not implemented!")
    ended = context.ended()
    assert ended is not None and (ended.code, ended.details) == (UNIMPLEMENTED, "Method not implemented!")
    assert (context.code(), context.details()) == (UNIMPLEMENTED, "Method not implemented!")


def test_the_context_reads_the_deadline_of_the_call_it_was_made_for() -> None:
    token = begin_deadline(Deadline.after(5.0, time.monotonic()))
    try:
        context = ServicerContext([])
    finally:
        end_deadline(token)
    left = context.time_remaining()
    assert left is not None and 4.0 < left <= 5.0 and context.is_active()
    token = begin_deadline(Deadline.after(0.0, time.monotonic()))
    try:
        assert not ServicerContext([]).is_active()
    finally:
        end_deadline(token)
