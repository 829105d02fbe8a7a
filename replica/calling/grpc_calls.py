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

A method whose requests stream (its endpoint lists it in `grpc_streaming`:
client-streaming and bidirectional calls) is given an async iterator of the
request messages instead of one (parsed when its first parameter is annotated
`AsyncIterator[SomeMessage]`), as they come; an `async def` returns the one
reply (client streaming), an async generator yields replies while requests
still come (bidirectional). Such a call reaches the replica as a WebSocket
session (`GrpcMethods.session`, an ASGI WebSocket app the replica host runs as
it runs a WebSocket's): each request message is one message in, the client's
half-close the disconnect, each reply one message out, and the close code
says how the call ended (`vocabulary.request_path.grpc_calls.close_for_code`).
A plain `def` or a plain generator cannot take a stream of requests, nor can
a method whose first parameter is annotated as one request (`bytes`, a
message class): UNIMPLEMENTED, as is a method the class lacks.

A backend naming a generated servicer (`grpc_servicer`) has the servicer's
methods instead (`replica.calling.servicers`), and only them: each parsed and
written by the generated deserializer and serializer, its kind the service's
(a plain `def` too may take a stream of requests: a blocking iterator, in a
thread), called `(request, context)` with a `ServicerContext`, or `(request)`.
A status a method sets with `context.set_code` ends its call as a
`GrpcAbort` does.
"""

from __future__ import annotations

import asyncio
import collections.abc
import inspect
import typing
from typing import TYPE_CHECKING, Any, AsyncGenerator, AsyncIterator, Callable, Iterable, Iterator

from replica.calling.asgi import BodyStream
from replica.calling.servicers import Servicer, ServicerContext, ServicerMethod
from vocabulary.request_path.grpc_calls import (
    FRAMED, STATUS_HEADER, STREAM_CLOSE_OK, UNIMPLEMENTED, GrpcAbort, close_for_code, frame, method_of, status_for_code,
)
from vocabulary.request_path.wire import WireRequest, WireResponse

if TYPE_CHECKING:  # the ASGI types the session app is called with (replica.calling.asgi's WebSocketSession)
    from httpedge.asgi import Receive, Send

__all__ = ["GrpcMethods", "NOT_METHODS"]

# The replica host's own hooks on a backend's class: never callable as gRPC methods.
NOT_METHODS = frozenset({"reconfigure", "check_health", "reconfigure_secrets"})
_UNARY_HEADERS = [(b"content-type", b"application/grpc")]
_STREAM_HEADERS = [(b"content-type", FRAMED)]
_END = object()
_ITERATORS = (collections.abc.AsyncIterator, collections.abc.AsyncIterable, collections.abc.AsyncGenerator)


class _Method:
    """One method of the backend's class, as it is called: how its request is read, how it runs, how its
    reply is written; a generated servicer's (`declared`) says it all, and is given a context."""

    __slots__ = ("function", "parse", "kind", "serialize", "declared")

    def __init__(self, function: Callable[..., Any], declared: ServicerMethod | None = None) -> None:
        self.function = function
        self.declared = declared
        self.parse = _parser(function) if declared is None else declared.deserialize
        self.serialize = None if declared is None else declared.serialize
        if inspect.isasyncgenfunction(function):
            self.kind = "async-stream"
        elif inspect.isgeneratorfunction(function):
            self.kind = "stream"
        elif inspect.iscoroutinefunction(function):
            self.kind = "async"
        else:
            self.kind = "sync"
        if declared is not None and self.kind == "sync" and declared.kind.value.endswith("_stream"):
            self.kind = "stream"  # a plain def returning an iterable of replies: iterated in threads


class GrpcMethods:
    """The gRPC methods of one backend's handler, looked up (and inspected) once each."""

    def __init__(self, handler: Any, servicer: Servicer | None = None) -> None:
        self._handler = handler
        self._servicer = servicer
        self._methods: dict[str, _Method | None] = {}

    def _method(self, name: str) -> _Method | None:
        if name in self._methods:
            return self._methods[name]
        found = None
        if self._servicer is not None:  # a generated servicer's methods, and only them
            declared = self._servicer.methods.get(name)
            found = None if declared is None else _Method(declared.behavior, declared)
        elif name.isidentifier() and not name.startswith("_") and name not in NOT_METHODS:
            function = getattr(self._handler, name, None)
            if callable(function) and not inspect.isclass(function):
                found = _Method(function)
        if len(self._methods) < 1024:  # a client naming methods at random must not grow it for ever
            self._methods[name] = found
        return found

    async def session(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        """A call whose requests stream, as an ASGI WebSocket app: the method named by the scope's path
        given the request messages as they are received, its replies sent, the close saying its code."""
        await receive()  # the session's websocket.connect
        name = method_of(scope["path"])
        method = self._method(name)
        if method is None or not _takes_a_stream(method):
            text = (f"the backend has no gRPC method {name!r} (a public method of its class)" if method is None
                    else f"the gRPC method {name!r} takes one request: its requests cannot stream "
                    "(an async def or async generator taking an iterator of them can)")
            await send({"type": "websocket.close", "code": close_for_code(UNIMPLEMENTED), "reason": text})
            return
        await send({"type": "websocket.accept"})
        parse = _stream_parser(method.function) if method.declared is None else method.parse
        context = None if method.declared is None or not method.declared.takes_context else (
            ServicerContext(list(scope.get("headers") or ())))

        async def requests() -> AsyncGenerator[Any, None]:
            while True:
                message = await receive()
                if message["type"] != "websocket.receive":  # the client's half-close (or its leaving)
                    return
                data = message.get("bytes") or b""
                yield data if parse is None else parse(data)

        given: Any = requests()
        if method.kind in ("sync", "stream"):  # a generated servicer's plain def: a blocking iterator, in a thread
            given = _blocking(given, asyncio.get_running_loop())
        arguments = (given,) if context is None else (given, context)
        try:
            try:
                if method.kind in ("async", "sync"):
                    reply = (await method.function(*arguments) if method.kind == "async"
                             else await asyncio.to_thread(method.function, *arguments))
                    ended = None if context is None else context.ended()
                    if ended is not None:
                        raise ended
                    await send({"type": "websocket.send", "bytes": _serialized(reply, method.serialize)})
                else:
                    replies = (method.function(*arguments) if method.kind == "async-stream"
                               else _in_threads(method.function(*arguments)))
                    try:
                        async for reply in replies:
                            await send({"type": "websocket.send", "bytes": _serialized(reply, method.serialize)})
                    finally:
                        await _close(replies)
            except Exception as error:  # noqa: BLE001 — re-raised unless the method set a status first
                ended = _status_set(context, error)
                if ended is None:
                    raise
                raise ended from None
            ended = None if context is None else context.ended()
            if ended is not None:
                raise ended
        except GrpcAbort as aborted:
            await send({"type": "websocket.close", "code": close_for_code(aborted.code), "reason": aborted.details})
            return
        await send({"type": "websocket.close", "code": STREAM_CLOSE_OK})

    async def call(self, wire: WireRequest) -> WireResponse | BodyStream:
        """Run the method the call names with its request message; its reply, or its stream of replies."""
        name = method_of(wire[1])
        method = self._method(name)
        if method is None or (method.declared is not None and method.declared.kind.requests_stream):
            text = (f"the backend has no gRPC method {name!r} (a public method of its class)" if method is None
                    else f"the gRPC method {name!r} takes a stream of requests, and this call sent one")
            return 501, [(b"content-type", b"text/plain; charset=utf-8")], text.encode()
        context = None if method.declared is None or not method.declared.takes_context else (
            ServicerContext(wire[3]))
        try:
            try:
                reply = await _run(method, wire[4], context)
            except Exception as error:  # noqa: BLE001 — re-raised unless the method set a status first
                ended = _status_set(context, error)
                if ended is None:
                    raise
                raise ended from None
            ended = None if context is None or isinstance(reply, BodyStream) else context.ended()
            if ended is not None:
                raise ended
            return reply
        except GrpcAbort as aborted:
            headers = [(b"content-type", b"text/plain; charset=utf-8"), (STATUS_HEADER, str(aborted.code).encode())]
            return status_for_code(aborted.code), headers, aborted.details.encode()


def _status_set(context: ServicerContext | None, error: Exception) -> GrpcAbort | None:
    """What ends a call whose method raised `error` instead of the error: the status it set first with
    `set_code` (as a generated servicer's UNIMPLEMENTED stub does before it raises); None: the error."""
    return None if context is None or isinstance(error, GrpcAbort) else context.ended()


async def _run(method: _Method, message: bytes, context: ServicerContext | None = None) -> WireResponse | BodyStream:
    request = message if method.parse is None else method.parse(message)
    arguments = (request,) if context is None else (request, context)
    serialize = method.serialize
    if method.kind == "async":
        return 200, _UNARY_HEADERS, _serialized(await method.function(*arguments), serialize)
    if method.kind == "sync":
        return 200, _UNARY_HEADERS, _serialized(await asyncio.to_thread(method.function, *arguments), serialize)
    replies: AsyncIterator[Any] = (
        method.function(*arguments) if method.kind == "async-stream" else _in_threads(method.function(*arguments))
    )
    return await _stream(replies, serialize)


async def _stream(replies: AsyncIterator[Any], serialize: Callable[[Any], bytes] | None = None) -> WireResponse | BodyStream:
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
                yield frame(_serialized(reply, serialize))
        finally:
            await _close(iterator)

    return BodyStream(200, _STREAM_HEADERS, frame(_serialized(first, serialize)), rest())


async def _close(iterator: AsyncIterator[Any]) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()


async def _in_threads(replies: Iterable[Any]) -> AsyncGenerator[Any, None]:
    """A sync generator's (or iterable's) items, each produced in a thread (it may block)."""
    iterator = iter(replies)
    try:
        while True:
            item = await asyncio.to_thread(next, iterator, _END)
            if item is _END:
                return
            yield item
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()


async def _next_or_end(requests: AsyncIterator[Any]) -> Any:
    return await anext(requests, _END)


def _blocking(requests: AsyncIterator[Any], loop: asyncio.AbstractEventLoop) -> Iterator[Any]:
    """The request messages as a blocking iterator, for a plain method in a thread (each waits on `loop`)."""
    while True:
        item = asyncio.run_coroutine_threadsafe(_next_or_end(requests), loop).result()
        if item is _END:
            return
        yield item


def _serialized(reply: Any, serialize: Callable[[Any], bytes] | None = None) -> bytes:
    if isinstance(reply, (bytes, bytearray, memoryview)):
        return bytes(reply)
    if serialize is not None:
        return bytes(serialize(reply))
    serialize = getattr(reply, "SerializeToString", None)
    if serialize is None:
        raise TypeError(
            f"a gRPC method returned {type(reply).__name__}: it must return bytes or a protobuf message"
        )
    return bytes(serialize())


def _takes_a_stream(method: _Method) -> bool:
    """Whether a method can be given a stream of requests: a generated servicer's that declares it so
    (any def), else an async def or async generator whose first parameter is not one request."""
    if method.declared is not None:
        return method.declared.kind.requests_stream
    return method.kind in ("async", "async-stream") and not _takes_one(method)


def _takes_one(method: _Method) -> bool:
    """Whether the method's first parameter is annotated as one request (`bytes`, a message class)."""
    return method.parse is not None or _first_annotation(method.function) in (bytes, bytearray, memoryview)


def _stream_parser(function: Callable[..., Any]) -> Callable[[bytes], Any] | None:
    """Each request message's parser when the method's first parameter is annotated with an async iterator
    of a protobuf message class (`AsyncIterator[HelloRequest]`)."""
    annotation = _first_annotation(function)
    arguments = typing.get_args(annotation) if typing.get_origin(annotation) in _ITERATORS else ()
    from_string = getattr(arguments[0], "FromString", None) if arguments else None
    return from_string if callable(from_string) else None


def _parser(function: Callable[..., Any]) -> Callable[[bytes], Any] | None:
    """The request's parser when the method's first parameter is annotated with a protobuf message class."""
    from_string = getattr(_first_annotation(function), "FromString", None)
    return from_string if callable(from_string) else None


def _first_annotation(function: Callable[..., Any]) -> Any:
    """What the function's first parameter is annotated with (resolved), or None."""
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
    return hints.get(parameters[0].name)
