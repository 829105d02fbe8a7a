"""A backend's generated gRPC servicer in the replica: what its add function registers, and the context its methods get.

A backend whose spec names `grpc_servicer = "pkg.helloworld_pb2_grpc:add_GreeterServicer_to_server"`
(or the generated `GreeterServicer` class, whose add function is found beside it) has its class's
instance registered as grpcio would, but on a recording stand-in for `grpc.Server`
(`RecordingServer`): the generated function builds one `grpc.RpcMethodHandler` per method of the
service, each holding the instance's bound method, the request's deserializer, the reply's
serializer and whether requests and replies stream, and gives them to
`server.add_registered_method_handlers(service, handlers)` (grpcio >= 1.63's generated code) and
`server.add_generic_rpc_handlers((generic_handler,))` (every version's; the names are read from it
when the first is not called). `load_servicer` returns them as a `Servicer`; no server is started:
calls come over the replica's data connection (`replica.calling.grpc_calls`).

A servicer's method is called as grpcio calls it, `(request, context)`, or `(request)` when it takes
one argument (Ray Serve's style). `ServicerContext` is the context, with what servicers commonly use:

- `invocation_metadata()`: the call's metadata, `(key, value)` pairs with `.key` and `.value` (a
  `-bin` key's value as bytes, others as text);
- `abort(code, details)`: ends the call with that status (`GrpcAbort`); it raises, so `await
  context.abort(...)` (grpc.aio's style) and `context.abort(...)` (grpc's) both work;
- `set_code(code)`, `set_details(details)`, `code()`, `details()`: a code other than OK set by a
  method that then returns, or raises (as the generated servicer's UNIMPLEMENTED stubs do), is the
  call's status;
- `time_remaining()`: seconds left until the call's deadline (None without one);
- `is_active()`: whether the call's deadline is still ahead.

Anything else of `grpc.ServicerContext` (peer, auth, trailing or initial metadata, compression) is
absent: an AttributeError, as any error of a method's, ends the call INTERNAL.
"""

from __future__ import annotations

import importlib
import inspect
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple

from ray_gitops.registry import current_deadline
from vocabulary.request_path.grpc_calls import OK, GrpcAbort
from vocabulary.spec.endpoints import GrpcMethodKind

__all__ = ["Metadatum", "RecordingServer", "Servicer", "ServicerContext", "ServicerMethod", "load_servicer",
           "record_servicer", "add_function"]


@dataclass(frozen=True)
class ServicerMethod:
    """One method of a servicer as its add function registered it."""

    name: str
    kind: GrpcMethodKind
    behavior: Callable[..., Any]  # the servicer's bound method
    deserialize: Callable[[bytes], Any] | None
    serialize: Callable[[Any], bytes] | None
    takes_context: bool  # called (request, context); else (request)


@dataclass(frozen=True)
class Servicer:
    """The service a servicer serves (its full name) and its methods by name."""

    service: str
    methods: Mapping[str, ServicerMethod]


class RecordingServer:
    """A stand-in for `grpc.Server` that keeps what an add_…_to_server function registers."""

    def __init__(self) -> None:
        self.service: str | None = None
        self.handlers: dict[str, Any] = {}

    def add_registered_method_handlers(self, service_name: str, method_handlers: Mapping[str, Any]) -> None:
        self.service = service_name
        self.handlers.update(method_handlers)

    def add_generic_rpc_handlers(self, generic_rpc_handlers: Any) -> None:
        for handler in generic_rpc_handlers:
            name = getattr(handler, "service_name", None)
            service = name() if callable(name) else None
            if self.service is None and isinstance(service, str):
                self.service = service
            # grpc._utilities.DictionaryGenericHandler keeps its handlers by full path: `/pkg.Service/Method`.
            for path, method_handler in dict(getattr(handler, "_method_handlers", None) or {}).items():
                self.handlers.setdefault(str(path).rpartition("/")[2], method_handler)


def add_function(servicer_path: str) -> Callable[[Any, Any], Any]:
    """The add_…_to_server function `servicer_path` (`module:function`, or `module:GeneratedServicer`) names."""
    module_name, _, attribute = servicer_path.partition(":")
    module = importlib.import_module(module_name)
    if inspect.isclass(getattr(module, attribute, None)):
        attribute = f"add_{attribute}_to_server"
    function = getattr(module, attribute, None)
    if not callable(function):
        raise TypeError(f"grpc_servicer {servicer_path!r}: {module_name}.{attribute} is not a function")
    return function


def record_servicer(add: Callable[[Any, Any], Any], servicer: Any) -> Servicer:
    """What `add(servicer, server)` registers on a recording server: the service and its methods."""
    server = RecordingServer()
    add(servicer, server)
    if server.service is None or not server.handlers:
        raise TypeError(f"{getattr(add, '__name__', add)!r} registered no service: it is not an add_…_to_server "
                        "function as protoc's gRPC plugin generates it")
    methods = {name: _method(name, handler) for name, handler in server.handlers.items()}
    return Servicer(server.service, methods)


def load_servicer(servicer_path: str, servicer: Any) -> Servicer:
    """`servicer` (the backend's instance) registered by the add function at `servicer_path`."""
    return record_servicer(add_function(servicer_path), servicer)


def _method(name: str, handler: Any) -> ServicerMethod:
    kind = GrpcMethodKind(
        f"{'stream' if handler.request_streaming else 'unary'}_{'stream' if handler.response_streaming else 'unary'}"
    )
    behavior = getattr(handler, kind.value)
    return ServicerMethod(name, kind, behavior, handler.request_deserializer, handler.response_serializer,
                          _takes_context(behavior))


def _takes_context(function: Callable[..., Any]) -> bool:
    """Whether a method takes (request, context): two positional parameters or more, or *args."""
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return True
    if any(parameter.kind is inspect.Parameter.VAR_POSITIONAL for parameter in parameters):
        return True
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(parameter.kind in positional for parameter in parameters) >= 2


class Metadatum(NamedTuple):
    """One metadata entry, as grpcio gives them: `key`, `value`."""

    key: str
    value: str | bytes


def _code_number(code: Any) -> int:
    return code.value[0] if isinstance(getattr(code, "value", None), tuple) else int(code)


class ServicerContext:
    """The `context` a servicer's method is given (see the module's docstring for what it has)."""

    def __init__(self, headers: list[tuple[bytes, bytes]]) -> None:
        self._headers = headers
        self._deadline = current_deadline()  # read on the replica's loop: a method in a thread has none
        self._code: int | None = None
        self._details = ""

    def invocation_metadata(self) -> tuple[Metadatum, ...]:
        return tuple(
            Metadatum(key.decode("latin-1"), value if key.endswith(b"-bin") else value.decode("latin-1"))
            for key, value in self._headers
            if not key.startswith(b":")  # ours: the gRPC marker, the deadline
        )

    def abort(self, code: Any, details: str = "") -> None:
        raise GrpcAbort(code, details)

    def set_code(self, code: Any) -> None:
        self._code = _code_number(code)

    def set_details(self, details: str) -> None:
        self._details = details

    def code(self) -> int | None:
        return self._code

    def details(self) -> str:
        return self._details

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else self._deadline.left(time.monotonic())

    def is_active(self) -> bool:
        return self._deadline is None or not self._deadline.passed(time.monotonic())

    def ended(self) -> GrpcAbort | None:
        """The status a method set with `set_code` (other than OK), as the abort that ends its call."""
        if self._code is None or self._code == OK:
            return None
        try:
            return GrpcAbort(self._code, self._details)
        except ValueError:  # not a status code grpc knows
            return None
