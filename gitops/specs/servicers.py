"""Static check of a backend's `grpc_servicer` at one commit: the service it names and its methods' kinds.

`grpc_servicer = "package.module:add_FooServicer_to_server"` names the
function protoc's gRPC plugin generates in a `*_pb2_grpc.py` module (or
`package.module:FooServicer`, the generated class, whose add function is
looked up beside it). Its body has the form the plugin always writes:

    rpc_method_handlers = {
        'SayHello': grpc.unary_unary_rpc_method_handler(servicer.SayHello, ...),
        ...
    }
    generic_handler = grpc.method_handlers_generic_handler('helloworld.Greeter', rpc_method_handlers)
    server.add_generic_rpc_handlers((generic_handler,))
    server.add_registered_method_handlers('helloworld.Greeter', rpc_method_handlers)  # newer grpcio

so the service's full name and each method's kind (`GrpcMethodKind`, the
`*_rpc_method_handler` that wraps it) are read from its syntax tree, as
`gitops.specs.imports` reads an import path: user code is never imported
or executed by the agent (the replica, which imports it anyway, calls the
function itself: `replica.calling.servicers`). A function that is not of
that form is refused with what it lacks.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from gitops.sources.hashing import Tree
from gitops.specs.imports import AttributeKind, module_functions, module_names, read_module
from vocabulary.spec.endpoints import GrpcMethodKind, grpc_service_name

__all__ = ["ResolvedServicer", "resolve_servicer", "missing_methods"]

_KINDS = {f"{kind.value}_rpc_method_handler": kind for kind in GrpcMethodKind}
_SERVICE_CALLS = ("method_handlers_generic_handler", "add_registered_method_handlers")


@dataclass(frozen=True)
class ResolvedServicer:
    """What a `grpc_servicer` path declares: its module's file, the service's full name and its methods
    (name, kind) in the order written; `error` is set when it declares none."""

    module_file: str | None
    service: str | None = None
    methods: tuple[tuple[str, GrpcMethodKind], ...] = ()
    error: str | None = None


def resolve_servicer(tree: Tree, servicer_path: str) -> ResolvedServicer:
    """The service and methods the generated add function at `servicer_path` registers."""
    module, _, attribute = servicer_path.partition(":")
    found, syntax, error = read_module(tree, module)
    if syntax is None:
        return ResolvedServicer(found, error=error)
    names, functions = module_names(syntax.body), module_functions(syntax.body)
    kind = names.get(attribute)
    if kind is None:
        return ResolvedServicer(found, error=f"'{attribute}' is not defined at module level in {found}")
    if kind is AttributeKind.CLASS:
        add = f"add_{attribute}_to_server"
        if add not in functions:
            return ResolvedServicer(found, error=f"'{attribute}' is a class, and {found} defines no {add} function "
                                    "beside it (name the add_…_to_server function protoc's gRPC plugin generates)")
        attribute = add
    function = functions.get(attribute) if names.get(attribute) is AttributeKind.FUNCTION else None
    if function is None:
        return ResolvedServicer(found, error=f"'{attribute}' in {found} is not a function: name the "
                                "add_…_to_server function protoc's gRPC plugin generates in a *_pb2_grpc.py module")
    service, methods = _registered(function)
    if service is None or not methods:
        return ResolvedServicer(found, error=f"'{attribute}' in {found} is not an add_…_to_server function as "
                                "protoc's gRPC plugin generates it: it registers no "
                                "grpc.method_handlers_generic_handler('package.Service', {'Method': "
                                "grpc.unary_unary_rpc_method_handler(...), ...})")
    try:
        grpc_service_name(service)
    except ValueError as bad:
        return ResolvedServicer(found, error=f"'{attribute}' in {found} registers {bad}")
    return ResolvedServicer(found, service, tuple(methods.items()))


def missing_methods(servicer: ResolvedServicer, methods: frozenset[str]) -> list[str]:
    """The servicer's methods that a class binding only `methods` lacks, in the order written."""
    return [name for name, _ in servicer.methods if name not in methods]


def _registered(function: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str | None, dict[str, GrpcMethodKind]]:
    """The service name and the methods the function's body registers (see the module's docstring)."""
    service: str | None = None
    methods: dict[str, GrpcMethodKind] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                kind = _KINDS.get(_called(value)) if isinstance(value, ast.Call) else None
                if kind is not None and isinstance(key, ast.Constant) and isinstance(key.value, str):
                    methods[key.value] = kind
        elif isinstance(node, ast.Call) and _called(node) in _SERVICE_CALLS and node.args:
            first = node.args[0]
            if service is None and isinstance(first, ast.Constant) and isinstance(first.value, str):
                service = first.value
    return service, methods


def _called(call: ast.Call) -> str:
    """The name a call calls: `f` of `f(...)` and of `grpc.f(...)`."""
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return call.func.id if isinstance(call.func, ast.Name) else ""
