"""Running ASGI callables inside a replica: one HTTP request, or one WebSocket.

Owns the replica half of the ASGI contract: building the scope (the route
prefix as `root_path`, `path` the full path), feeding `receive`, and turning
what the app `send`s into a `WireResponse` when the whole body came in one
message, or into a `BodyStream` (status, headers, first chunk, and the rest
as an async iterator) when it streams. The same code runs a user's FastAPI or
Starlette app and a `StreamingResponse` a plain handler returned (a Starlette
response is an ASGI app). A WebSocket is a `WebSocketSession`: the app runs as a task,
messages from the client are `push`ed in, and what the app sends comes out
of `outbound()` until it closes. An app's lifespan (FastAPI's startup and
shutdown, e.g. loading a model) runs with the replica: `Lifespan.start`
before the first request, `stop` when the replica drains; an app that does
not speak the lifespan protocol is served without it.

Not here: keeping streams and sockets between Ray calls (`replica.host`),
what a handler's plain return values become (`replica.calling.conversions`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from dataclasses import dataclass
from typing import Any, AsyncGenerator, Mapping

from httpedge.asgi import App, Message
from vocabulary.request_path.wire import WireRequest, WireResponse, split_root_path

__all__ = ["AppError", "BodyStream", "Lifespan", "WebSocketSession", "is_asgi_app", "serve_http", "websocket_scope"]

logger = logging.getLogger(__name__)


# Spec 2.4: a streaming response learns of a gone client by its task being
# cancelled, so nothing needs to listen on `receive` for a disconnect.
_ASGI = {"version": "3.0", "spec_version": "2.4"}
_END = object()  # the app returned
# At most this much of a stream is joined into one item sent back to the proxy.
_JOIN_BYTES = 256 * 1024
# At most this many messages of an app's answer wait for the proxy to take
# them; the app's `send` waits beyond that, so a slow client pauses the app.
# It is also the most a stream moves per turn when the replica cannot keep up,
# which bounds the gap each stream then sees. 5,000 open SSE streams of 20
# events/s (`python -m bench.streams --systems ours`, shared 2-core machine, two runs
# each): with 64, 75-82k events/s, gap p99 1.7 s, max 5.6-7.9 s; with 16,
# 82-86k events/s, p99 1.0-1.1 s, max 2.1-5.0 s; with 8, 64-75k events/s,
# p99 0.7-0.9 s, max 1.7 s.
_AHEAD_MESSAGES = 16
# A chunk taken within this long of the one before it comes from a quick producer (an LLM
# engine on a CPU makes a token every ~25 us; a GPU model's tokens and server-sent events are
# milliseconds apart): its stream gives the app more turns of the loop before an item leaves,
# so one item, and one write on each hop, carries several chunks.
_QUICK_S = 0.001
# At most this many chunks in one item gathered so (a proxy that reads nothing holds an app to its
# window of items, each at most this many of the app's messages).
_GATHER_MOST = 64


class AppError(Exception):
    """The app returned or raised without starting a response; the text is for the log."""


@dataclass(frozen=True)
class BodyStream:
    """A streaming answer: closing `rest` stops the app that produces it."""

    status: int
    headers: list[tuple[bytes, bytes]]
    first_chunk: bytes
    rest: AsyncGenerator[bytes, None]


def is_asgi_app(target: Any) -> bool:
    """A FastAPI/Starlette instance, or anything called as `await app(scope, receive, send)`."""
    call = target if inspect.isfunction(target) else getattr(target, "__call__", None)  # noqa: B004 — the bound __call__ itself is inspected (is it a coroutine function?), not whether target is callable
    if call is None or not inspect.iscoroutinefunction(call):
        return False
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return False
    required = [p for p in parameters if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(required) == 3


def _scope(kind: str, wire: WireRequest) -> dict[str, Any]:
    method, path, query_string, headers, _ = wire
    headers, root_path = split_root_path(headers)
    scope: dict[str, Any] = {
        "type": kind,
        "asgi": _ASGI,
        "http_version": "1.1",
        "path": path,
        "raw_path": path.encode("latin-1", "replace"),
        "root_path": root_path,
        "query_string": query_string,
        "headers": headers,
        "client": None,
        "server": None,
    }
    if kind == "http":
        scope.update(method=method, scheme="http")
    else:
        scope.update(scheme="ws", subprotocols=_subprotocols(headers))
    return scope


def websocket_scope(wire: WireRequest) -> dict[str, Any]:
    return _scope("websocket", wire)


def _subprotocols(headers: list[tuple[bytes, bytes]]) -> list[str]:
    return [
        token.strip().decode("latin-1")
        for name, value in headers if name == b"sec-websocket-protocol"
        for token in value.split(b",") if token.strip()
    ]


async def serve_http(app: App, wire: WireRequest) -> WireResponse | BodyStream:
    """Run `app` for one request: the whole answer, or its head and the rest as a stream."""
    body = wire[4]
    given = False
    outbox = _Outbox()

    async def receive() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        # No disconnect is ever reported: a gone client cancels this task instead (spec 2.4).
        never: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        return await never

    async def run() -> None:
        try:
            await app(_scope("http", wire), receive, outbox.put)
        finally:
            outbox.put_nowait(_END)

    task = asyncio.get_running_loop().create_task(run(), name="app")  # named: an unnamed task's name is formatted
    task.add_done_callback(_log_failure)
    try:
        start = await outbox.take()
        if start is _END or start.get("type") != "http.response.start":
            _raise_from(task, "the app returned without starting a response")
        message = await outbox.take()
        if message is _END:
            return start["status"], list(start.get("headers", [])), b""
        if not message.get("more_body", False):
            return start["status"], list(start.get("headers", [])), bytes(message.get("body", b""))
    except BaseException:
        task.cancel()
        raise
    # The first chunk takes along what the app has sent already: the rest is only claimed one round
    # trip later, and an OpenAI chat stream's first message is its role alone, its first token next.
    first, done = _joined([bytes(message.get("body", b""))], False, outbox)
    return BodyStream(start["status"], list(start.get("headers", [])), first, _rest(outbox, task, done))


class _Outbox:
    """What an app sent, until it is taken: its `put` (the app's `send`) waits while
    `_AHEAD_MESSAGES` wait, `put_nowait` never does (the app's end). One taker.

    A list and two futures. An `asyncio.Queue` behind an `asyncio.Semaphore` did the
    same at 3-4 times the cost: the semaphore's `acquire` alone was a quarter of a
    replica's py-spy samples with 5,000 open SSE streams (`python -m bench.streams
    --streams 5000`), and a message put and taken cost 1.7-2.5 us against 0.5-0.85 us
    now (uvloop, 200,000 messages through one outbox, 2-core machine; issue 48). A list,
    not a deque: it holds at most `_AHEAD_MESSAGES` and the app's end, and an empty deque
    is 760 bytes, held by every open stream."""

    __slots__ = ("_messages", "_taker", "_room")

    def __init__(self) -> None:
        self._messages: list[Any] = []
        self._taker: asyncio.Future[None] | None = None  # the taker, waiting for a message
        self._room: asyncio.Future[None] | None = None  # the app, waiting for room

    async def put(self, message: Any) -> None:
        while len(self._messages) >= _AHEAD_MESSAGES:
            if self._room is None or self._room.done():
                self._room = asyncio.get_running_loop().create_future()
            await self._room
        self.put_nowait(message)

    def put_nowait(self, message: Any) -> None:
        self._messages.append(message)
        taker = self._taker
        if taker is not None and not taker.done():
            taker.set_result(None)

    def empty(self) -> bool:
        return not self._messages

    async def take(self) -> Any:
        while not self._messages:
            self._taker = asyncio.get_running_loop().create_future()
            try:
                await self._taker
            finally:
                self._taker = None
        return self.take_nowait()

    def take_nowait(self) -> Any:
        message = self._messages.pop(0)
        room = self._room
        if room is not None and not room.done():
            room.set_result(None)
        return message


async def _rest(outbox: _Outbox, task: asyncio.Future[None], done: bool) -> AsyncGenerator[bytes, None]:
    """The body after its first chunk (nothing more when it was `done` with it). Each item waits
    for one chunk, then joins every chunk the app has already sent (`_joined`): a fast producer
    pays one Ray object per batch instead of per chunk, while a slow one (server-sent events)
    still gets each chunk out the moment it exists. A producer whose chunks come within
    `_QUICK_S` of each other also gets further turns of the loop, as long as each brings more
    (`_gathered`)."""
    last = time.perf_counter()
    try:
        while not done:
            chunks, done = _body_chunks(await outbox.take())
            now = time.perf_counter()
            quick, last = now - last < _QUICK_S, now
            item, done = await _gathered(chunks, done, outbox) if quick else _joined(chunks, done, outbox)
            if item:
                yield item
        if task.done():
            # Ended by the app returning or raising, not by its last chunk: one
            # that raised breaks the stream (docs/reference/http.md: "handler raised").
            _raise_failure(task)
    finally:
        task.cancel()


def _joined(chunks: list[bytes], done: bool, outbox: _Outbox) -> tuple[bytes, bool]:
    """`chunks` and every chunk the app has sent since, up to `_JOIN_BYTES`, as one item; and whether
    the body ended among them."""
    _, done = _taken(chunks, sum(map(len, chunks)), done, outbox)
    return b"".join(chunks), done


async def _gathered(chunks: list[bytes], done: bool, outbox: _Outbox) -> tuple[bytes, bool]:
    """As `_joined`, and then another turn of the loop for the app while each turn brings more, up to
    `_GATHER_MOST` chunks in all. An LLM engine on a CPU yields a token per turn: 128 tokens
    through the proxy took 8.2 ms as an item each and 3.9 ms gathered, against 3.3 ms straight
    from uvicorn (one request at a time, the engine of `python -m bench.llm_endpoint`)."""
    size, done = _taken(chunks, sum(map(len, chunks)), done, outbox)
    while not done and size < _JOIN_BYTES and len(chunks) < _GATHER_MOST:
        await asyncio.sleep(0)
        if outbox.empty():
            break
        size, done = _taken(chunks, size, done, outbox)
    return b"".join(chunks), done


def _taken(chunks: list[bytes], size: int, done: bool, outbox: _Outbox) -> tuple[int, bool]:
    """Onto `chunks` (`size` bytes so far), what the app has sent since, up to `_JOIN_BYTES` and
    `_GATHER_MOST` chunks in all (only gathering reaches that count: the outbox holds fewer): their
    size then, and whether the body ended among them."""
    while not done and size < _JOIN_BYTES and len(chunks) < _GATHER_MOST and not outbox.empty():
        more, done = _body_chunks(outbox.take_nowait())
        chunks += more
        size += sum(map(len, more))
    return size, done


def _body_chunks(message: Any) -> tuple[list[bytes], bool]:
    """The body bytes a message carries and whether the body ends with it. Always exact `bytes`, so
    that `b"".join` of a lone chunk is that chunk, uncopied."""
    if message is _END:
        return [], True
    if message.get("type") != "http.response.body":
        return [], False
    return [bytes(message.get("body", b""))], not message.get("more_body", False)


def _raise_failure(task: asyncio.Future[None]) -> None:
    error = task.exception() if task.done() and not task.cancelled() else None
    if error is not None:
        raise error


def _raise_from(task: asyncio.Future[None], text: str) -> None:
    _raise_failure(task)
    raise AppError(text)


def _log_failure(task: asyncio.Future[None]) -> None:
    # An app that raised after answering (Starlette re-raises behind its own
    # 500) has nobody left to tell: its traceback goes to the log.
    if not task.cancelled() and task.exception() is not None:
        logger.error("ASGI app raised", exc_info=task.exception())


# What one WebSocket's client may have queued for its app, in message bytes,
# before its next message waits (and with it the proxy's reading from the
# client); one message is always let through, however large.
WEBSOCKET_BUDGET_BYTES = 4 * 1024 * 1024
# A client message larger than this closes the WebSocket with 1009 (message too big).
WEBSOCKET_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
MESSAGE_TOO_BIG = 1009
# What the app may have sent that its caller has not taken yet: past it, the
# app's `send` waits, so a slow client holds the app (with the caller's own
# backpressure: the data connection's window, or Ray's generator backpressure).
WEBSOCKET_OUTBOUND_MESSAGES = 16


def _message_bytes(message: Message) -> int:
    body = message.get("bytes") or message.get("text") or b""
    return len(body) if isinstance(body, (bytes, bytearray, str)) else 0


class WebSocketSession:
    """One WebSocket connection's app, between the proxy's two pumps.

    What the client sends waits in a queue for the app, within a byte budget:
    `push` returns once its message is queued, so a client that sends faster
    than the app reads is held back (the proxy answers its next message only
    then) instead of growing the replica's memory. A message over
    `max_message_bytes` closes the WebSocket with 1009 both ways. What the
    app sends waits likewise: at most `WEBSOCKET_OUTBOUND_MESSAGES` ahead of
    whoever takes it from `outbound`."""

    def __init__(
        self,
        app: App,
        wire: WireRequest,
        budget_bytes: int = WEBSOCKET_BUDGET_BYTES,
        max_message_bytes: int = WEBSOCKET_MAX_MESSAGE_BYTES,
    ) -> None:
        self._inbound: asyncio.Queue[Message] = asyncio.Queue()
        self._outbound: asyncio.Queue[Any] = asyncio.Queue()
        self._budget = budget_bytes
        self._max_message = max_message_bytes
        self.queued_bytes = 0  # client messages pushed and not yet received by the app
        self._room = asyncio.Event()
        self._room.set()
        self._closed = False
        self._unsent = 0  # messages the app sent that `outbound` has not yielded yet
        self._out_room = asyncio.Event()
        self._out_room.set()
        self._inbound.put_nowait({"type": "websocket.connect"})
        self._task = asyncio.ensure_future(self._run(app, websocket_scope(wire)))
        self._task.add_done_callback(_log_failure)

    async def _run(self, app: App, scope: dict[str, Any]) -> None:
        try:
            await app(scope, self._receive, self._send)
        finally:
            self._outbound.put_nowait(_END)

    async def _send(self, message: Mapping[str, Any]) -> None:
        while self._unsent >= WEBSOCKET_OUTBOUND_MESSAGES:
            self._out_room.clear()
            await self._out_room.wait()
        self._unsent += 1
        self._outbound.put_nowait(message)

    async def _receive(self) -> Message:
        message = await self._inbound.get()
        self.queued_bytes -= _message_bytes(message)
        if self.queued_bytes < self._budget:
            self._room.set()
        return message

    async def push(self, message: Message) -> None:
        """A message from the client (`websocket.receive` or `websocket.disconnect`),
        once there is room for it in the session's budget."""
        if self._closed:
            return
        size = _message_bytes(message)
        if size > self._max_message:
            self._close(MESSAGE_TOO_BIG)
            return
        while size and self.queued_bytes and self.queued_bytes + size > self._budget:
            self._room.clear()
            await self._room.wait()
            if self._closed:
                return
        self.queued_bytes += size
        self._inbound.put_nowait(message)

    def _close(self, code: int) -> None:
        """End the session with `code`: the client gets the close, the app the disconnect."""
        self._closed = True
        self._room.set()  # pushes waiting for room give up
        self._inbound.put_nowait({"type": "websocket.disconnect", "code": code})
        self._unsent += 1
        self._outbound.put_nowait({"type": "websocket.close", "code": code, "reason": ""})

    async def outbound(self) -> AsyncGenerator[Message, None]:
        """What the app sends, until it closes or returns; closing this stops
        the app. An app that raised raises here, after what it sent."""
        try:
            while True:
                message = await self._outbound.get()
                if message is _END:
                    _raise_failure(self._task)
                    return
                self._unsent -= 1
                self._out_room.set()
                yield message
                if message.get("type") == "websocket.close":
                    return
        finally:
            self._task.cancel()


class Lifespan:
    """One app's lifespan protocol: startup before serving, shutdown after."""

    def __init__(self, app: App) -> None:
        self._app = app
        self._inbound: asyncio.Queue[Message] = asyncio.Queue()
        self._outbound: asyncio.Queue[Any] = asyncio.Queue()
        self._task: asyncio.Future[None] | None = None

    async def _run(self) -> None:
        try:
            await self._app({"type": "lifespan", "asgi": _ASGI, "state": {}}, self._inbound.get, self._outbound.put)
        finally:
            self._outbound.put_nowait(_END)

    async def start(self) -> None:
        """Run the app's startup; raises `AppError` with its message if it failed."""
        self._task = asyncio.ensure_future(self._run())
        self._inbound.put_nowait({"type": "lifespan.startup"})
        answer = await self._outbound.get()
        if answer is _END:
            # Raised or returned at once: the app has no lifespan (ASGI spec), so serve without one.
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
            return
        if answer.get("type") == "lifespan.startup.failed":
            await asyncio.gather(self._task, return_exceptions=True)  # Starlette re-raises after reporting
            self._task = None
            raise AppError(f"the app's startup failed: {answer.get('message', '')}")

    async def stop(self) -> None:
        """Run the app's shutdown, if it took part in startup."""
        if self._task is None:
            return
        self._inbound.put_nowait({"type": "lifespan.shutdown"})
        answer = await self._outbound.get()
        if answer is not _END and answer.get("type") == "lifespan.shutdown.failed":
            logger.error("the app's shutdown failed: %s", answer.get("message", ""))
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self._task = None
