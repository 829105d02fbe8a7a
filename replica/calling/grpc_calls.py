"""A gRPC call in the replica: the backend's method named as the gRPC method, bytes in, bytes out.

The proxy's gRPC port routes a call to an endpoint by its service
(`[endpoints.X] grpc_service`), and it reaches a replica of the chosen backend
as a wire request marked as a gRPC call (`vocabulary.request_path.grpc_calls`)
over the usual data connection. As in Ray Serve, the backend's class has a
method named as each gRPC method (`SayHello` for `/helloworld.Greeter/SayHello`),
given the request message:

- as `bytes`, unless its parameter is annotated with a protobuf message class
  (anything with `FromString`), which then parses it;
- it returns the reply message: `bytes`, or a protobuf message (anything with
  `SerializeToString`);
- a method that is a generator or an async generator streams its replies
  (server streaming), each item one message;
- a plain method runs in a thread, an `async def` one on the replica's loop.

Only public methods are methods of the service: a name starting with `_`, or
one of the replica's own hooks (`reconfigure`, `check_health`,
`reconfigure_secrets`), or one the class does not have, is answered 501
(UNIMPLEMENTED at the client). A method ends its call with a status code of
its own by raising `GrpcAbort(code, details)` (`vocabulary.request_path.grpc_calls`;
before its first message, for a streaming one): a refusal, answered with the
code, not an error of the code. Other exceptions propagate as a handler's do (the
client gets INTERNAL; the traceback goes to the replica's log and status).
A streamed reply is a `BodyStream` whose chunks are the messages, each framed
(`frame`), its first message read before the answer's head goes back, so a
method that raises before its first message fails the call as a whole.
"""

from __future__ import annotations

import asyncio
import inspect
import typing
from typing import Any, AsyncGenerator, AsyncIterator, Callable, Iterator

from replica.calling.asgi import BodyStream
from vocabulary.request_path.grpc_calls import FRAMED, STATUS_HEADER, GrpcAbort, frame, method_of, status_for_code
from vocabulary.request_path.wire import WireRequest, WireResponse

__all__ = ["GrpcMethods", "NOT_METHODS"]

# The replica host's own hooks on a backend's class: never callable as gRPC methods.
NOT_METHODS = frozenset({"reconfigure", "check_health", "reconfigure_secrets"})
_UNARY_HEADERS = [(b"content-type", b"application/grpc")]
_STREAM_HEADERS = [(b"content-type", FRAMED)]
_END = object()


class _Method:
    """One method of the backend's class, as it is called: how its request is read, how it runs."""

    __slots__ = ("function", "parse", "kind")

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        self.parse = _parser(function)
        if inspect.isasyncgenfunction(function):
            self.kind = "async-stream"
        elif inspect.isgeneratorfunction(function):
            self.kind = "stream"
        elif inspect.iscoroutinefunction(function):
            self.kind = "async"
        else:
            self.kind = "sync"


class GrpcMethods:
    """The gRPC methods of one backend's handler, looked up (and inspected) once each."""

    def __init__(self, handler: Any) -> None:
        self._handler = handler
        self._methods: dict[str, _Method | None] = {}

    def _method(self, name: str) -> _Method | None:
        if name in self._methods:
            return self._methods[name]
        found = None
        if name.isidentifier() and not name.startswith("_") and name not in NOT_METHODS:
            function = getattr(self._handler, name, None)
            if callable(function) and not inspect.isclass(function):
                found = _Method(function)
        if len(self._methods) < 1024:  # a client naming methods at random must not grow it for ever
            self._methods[name] = found
        return found

    async def call(self, wire: WireRequest) -> WireResponse | BodyStream:
        """Run the method the call names with its request message; its reply, or its stream of replies."""
        name = method_of(wire[1])
        method = self._method(name)
        if method is None:
            text = f"the backend has no gRPC method {name!r} (a public method of its class)"
            return 501, [(b"content-type", b"text/plain; charset=utf-8")], text.encode()
        try:
            return await _run(method, wire[4])
        except GrpcAbort as aborted:
            headers = [(b"content-type", b"text/plain; charset=utf-8"), (STATUS_HEADER, str(aborted.code).encode())]
            return status_for_code(aborted.code), headers, aborted.details.encode()


async def _run(method: _Method, message: bytes) -> WireResponse | BodyStream:
    request = message if method.parse is None else method.parse(message)
    if method.kind == "async":
        return 200, _UNARY_HEADERS, _serialized(await method.function(request))
    if method.kind == "sync":
        return 200, _UNARY_HEADERS, _serialized(await asyncio.to_thread(method.function, request))
    replies: AsyncIterator[Any] = (
        method.function(request) if method.kind == "async-stream" else _in_threads(method.function(request))
    )
    return await _stream(replies)


async def _stream(replies: AsyncIterator[Any]) -> WireResponse | BodyStream:
    """The replies as framed messages; the first read now, so an early failure is the call's."""
    iterator = aiter(replies)
    try:
        first = await anext(iterator)
    except StopAsyncIteration:
        return 200, _STREAM_HEADERS, b""
    except BaseException:
        await _close(iterator)
        raise

    async def rest() -> AsyncGenerator[bytes, None]:
        try:
            async for reply in iterator:
                yield frame(_serialized(reply))
        finally:
            await _close(iterator)

    return BodyStream(200, _STREAM_HEADERS, frame(_serialized(first)), rest())


async def _close(iterator: AsyncIterator[Any]) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()


async def _in_threads(replies: Iterator[Any]) -> AsyncGenerator[Any, None]:
    """A sync generator's items, each produced in a thread (it may block)."""
    try:
        while True:
            item = await asyncio.to_thread(next, replies, _END)
            if item is _END:
                return
            yield item
    finally:
        close = getattr(replies, "close", None)
        if close is not None:
            close()


def _serialized(reply: Any) -> bytes:
    if isinstance(reply, (bytes, bytearray, memoryview)):
        return bytes(reply)
    serialize = getattr(reply, "SerializeToString", None)
    if serialize is None:
        raise TypeError(
            f"a gRPC method returned {type(reply).__name__}: it must return bytes or a protobuf message"
        )
    return bytes(serialize())


def _parser(function: Callable[..., Any]) -> Callable[[bytes], Any] | None:
    """The request's parser when the method's first parameter is annotated with a protobuf message class."""
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return None
    if not parameters:
        return None
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # noqa: BLE001 — an annotation that does not resolve: the request stays bytes
        return None
    annotation = hints.get(parameters[0].name)
    from_string = getattr(annotation, "FromString", None)
    return from_string if callable(from_string) else None
