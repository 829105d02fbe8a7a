"""A lean HTTP/1.1 server for one ASGI3 app: every listener of ours.

The proxy's public listener and the agent's admin and webhook listeners
(`gitops.admin.api.server`) are served by it, so each bound below is written once.

Owns the HTTP/1.1 connection: `asyncio.Protocol` + httptools' parser, one
task per request (the app's), nothing else per request but its scope, one
small exchange object and the response head. It serves:

- keep-alive, closed after `EdgeLimits.keep_alive_s` idle; `Connection:
  close` and HTTP/1.0 close after their answer; pipelined requests are
  answered in order, one at a time (reading pauses while they queue);
- request bodies (Content-Length or chunked) through `receive()` with
  `more_body`; reading pauses while more than `_HIGH_WATER` bytes of body
  wait for the app; `Expect: 100-continue` is answered when the app first
  asks for the body; `http.disconnect` once the client has gone (or the
  answer is complete);
- responses framed by Content-Length when the app's first body message is
  its last (the length added if the app gave none), chunked when it streams
  (`more_body=True`), no body for HEAD, 1xx, 204 and 304; the head is
  written together with the first body message (in one write: joined to
  a body up to `_JOINED_UP_TO`, beside a larger one, which is not copied); `send()` waits while the
  transport's write buffer is full; a `date` header, no `server` header;
- the edge bounds (`httpedge.limits.EdgeLimits`), applied at the socket
  before any app code runs, with the edge's answers (`httpedge.answers`):
  431 once the raw header bytes pass the limit (a 64 MiB header is cut off,
  not buffered), 408 when the headers are not complete `header_timeout_s`
  after the connection opened (or after the first byte of a later request),
  503 + Retry-After on a connection beyond the cap (the app never called),
  and 400 for what does not parse. The body's deadline is the app's (it
  reads the body under `body_timeout_s`);
- trailers (after a chunked body) are dropped, never added to the scope
  the app already has; the bytes after the last chunk's header count
  against `max_header_bytes` (431, or the connection closed if an answer
  is half written);
- an answer given before the whole request was read (a 404 or 401 while
  the body still arrives) says `connection: close`, and the connection
  then lingers (`httpedge.answers.LINGER_S`, input dropped) and closes:
  a dripped body cannot hold a connection after its answer;
- WebSocket upgrades handed, with the connection, to uvicorn's sans-I/O
  WebSocket protocol (as uvicorn's own httptools protocol does), given
  `websockets=True`;
- graceful shutdown: stop accepting, close idle connections, let answers in
  flight finish within a bound, then close everything.

The header deadline and the keep-alive idle timeout are two deadlines on
the connection served by one timer, re-armed only when a deadline comes
before the one it waits for: a busy keep-alive connection moves its
deadlines on every request but touches the timer a few times a minute,
where a timer per deadline would be armed and cancelled twice a request.
Nothing else is timed per request: the linger's close is the one timer an
ending connection gets. Each exchange's answer moves through one phase
(`_Phase`), its request body through another (`_Body`). Nagle is switched
off on every connection: asyncio does so only for sockets made with
`proto=IPPROTO_TCP`, and an answer written in more than one write (a
stream) would otherwise wait on the client's delayed ACK.

Must not: know routes, replicas or the agent (the app does); imports nothing
of ours but `httpedge`.
"""

from __future__ import annotations

import asyncio
import email.utils
import enum
import http
import logging
import re
import socket
import time
import urllib.parse
from typing import Any, Mapping

import httptools

from httpedge.answers import end_with, refusal
from httpedge.asgi import App, Message, Scope
from httpedge.limits import EdgeLimits

__all__ = ["Server", "App"]

logger = logging.getLogger(__name__)


_HIGH_WATER = 64 * 1024  # buffered request body above which reading pauses
# An answer's first body up to this size is joined to its head (one small copy,
# one buffer); a larger one goes beside it, uncopied (on uvloop, one vectored write).
_JOINED_UP_TO = 64 * 1024
_BACKLOG = 2048
_TIMER_SLACK_S = 0.001  # the loop may run a timer up to its clock resolution early
_ASGI = {"version": "3.0", "spec_version": "2.3"}
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_LAST_CHUNK = b"0\r\n\r\n"
_CLOSE = b"connection: close\r\n"
_CHUNKED = b"transfer-encoding: chunked\r\n"
# A header name is a token; a value has no control character but tab, so it
# can never end its line early (response splitting). Checked on all names,
# and on all values, joined: two searches per response.
_NAME = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]*")
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")


def _status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase.encode()
    except ValueError:
        phrase = b""
    return b"HTTP/1.1 %d %s\r\n" % (status, phrase)


_STATUS_LINES = {status: _status_line(status) for status in range(100, 600)}
_INTERNAL_ERROR = refusal(500, "Internal Server Error")

_date_second = -1
_date_line = b""


def _date() -> bytes:
    """The `date` header line, made once a second."""
    global _date_second, _date_line
    now = int(time.time())
    if now != _date_second:
        _date_second = now
        _date_line = b"date: " + email.utils.formatdate(now, usegmt=True).encode() + b"\r\n"
    return _date_line


class _Refused(Exception):
    """Stops the parser once a request has been answered at the edge."""


class _Phase(enum.Enum):
    """Where an exchange's answer is; each moves only forward."""

    WAITING = "no http.response.start yet"
    HELD = "the head is held until the first body message"
    SENDING = "the head is written, more body to come"
    COMPLETE = "the answer is complete"
    GONE = "the client left (or the edge answered) before the answer was complete"


class _Body(enum.Enum):
    """Where an exchange's request body is."""

    ARRIVING = "the parser has more of it to come"
    ARRIVED = "all parsed; its last message not yet handed to the app"
    HANDED = "its last message was handed to the app"


# Module names for the phases the hot path compares against (a global is one lookup, an enum member two).
_WAITING, _HELD, _SENDING, _COMPLETE, _GONE = _Phase
_ARRIVING, _ARRIVED, _HANDED = _Body


class _Dropped(list[tuple[bytes, bytes]]):
    """Where the parser's header callback writes once the head is parsed: trailers are dropped, never
    appended to a scope the app already has."""

    def append(self, item: tuple[bytes, bytes]) -> None:
        pass


_TRAILERS = _Dropped()


class Server:
    """Serves `app` on the sockets given to `serve` until `shutdown`."""

    def __init__(self, app: App, limits: EdgeLimits = EdgeLimits(), websockets: bool = False) -> None:
        self.app = app
        self.limits = limits
        self.started = False
        # Every open connection, ours and handed-over WebSockets: the cap counts them all.
        self.connections: set[Any] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.websockets = _WebSockets(app, self.connections) if websockets else None
        self._servers: list[asyncio.Server] = []
        self._stopped: asyncio.Future[None] | None = None

    async def serve(self, sockets: list[socket.socket]) -> None:
        """Listen on `sockets` (bound); returns once `shutdown` is done (cancelled, closes everything at once)."""
        loop = asyncio.get_running_loop()
        self._stopped = loop.create_future()
        for sock in sockets:
            self._servers.append(await loop.create_server(lambda: _Connection(self), sock=sock, backlog=_BACKLOG))
        self.started = True
        try:
            await self._stopped
        except asyncio.CancelledError:  # stopped without `shutdown`: nothing left listening or open
            for server in self._servers:
                server.close()
            for connection in list(self.connections):
                connection.transport.close()
            raise

    async def shutdown(self, grace_s: float) -> None:
        """Stop accepting, close idle connections, give answers in flight `grace_s`, then close the rest."""
        for server in self._servers:
            server.close()
        for connection in list(self.connections):
            connection.shutdown()
        in_flight = set(self.tasks)
        if self.websockets is not None:
            in_flight |= self.websockets.state.tasks
        if in_flight:
            _, late = await asyncio.wait(in_flight, timeout=grace_s)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=1.0)
        for connection in list(self.connections):
            connection.transport.close()
        if self._stopped is not None and not self._stopped.done():
            self._stopped.set_result(None)


class _WebSockets:
    """uvicorn's sans-I/O WebSocket protocol, taking over upgraded connections."""

    def __init__(self, app: App, connections: set[Any]) -> None:
        from uvicorn.config import Config
        from uvicorn.server import ServerState

        self.config = Config(app, ws="websockets-sansio", lifespan="off", interface="asgi3", log_config=None,
                             access_log=False, log_level="warning")
        self.config.load()
        self.state = ServerState()
        self.state.connections = connections

    def take(self, transport: asyncio.Transport, request: bytes) -> None:
        assert self.config.ws_protocol_class is not None
        protocol = self.config.ws_protocol_class(  # type: ignore[call-arg]  # uvicorn's typed signature lacks the keywords its classes take
            config=self.config, server_state=self.state, app_state={}
        )
        protocol.connection_made(transport)
        protocol.data_received(request)
        transport.set_protocol(protocol)


class _Connection(asyncio.Protocol):
    """One client connection: parses requests, runs the app's exchanges in order."""

    # Slots: one of these lives as long as its connection, and an instance dict of this many
    # attributes took 1.5 KiB more per connection (tracemalloc, 1,000 open streams).
    __slots__ = (
        "server", "app", "limits", "loop", "parser", "transport", "local", "peer",
        "url", "headers", "header_size", "expect_continue", "parsing", "active", "pipeline",
        "awaiting_headers", "header_bytes", "header_deadline", "over_cap", "refused", "upgrading",
        "chunk_seq", "bare_chunk", "trailer_bytes",
        "idle_deadline", "timer", "timer_at", "read_paused", "write_paused", "drained", "closing",
    )

    def __init__(self, server: Server) -> None:
        self.server = server
        self.app = server.app
        self.limits = server.limits
        self.loop = asyncio.get_running_loop()
        self.parser = httptools.HttpRequestParser(self)
        # Answer a pipelined request that follows `Connection: close` rather than failing the parse.
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # set in connection_made, before any other call
        self.local: tuple[str, int] | None = None
        self.peer: tuple[str, int] | None = None
        # Per request being parsed.
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.header_size = 0  # the target's and headers' bytes, counted as they are parsed
        self.expect_continue = False
        self.parsing: _Exchange | None = None
        # The exchange being answered, and those parsed behind it.
        self.active: _Exchange | None = None
        self.pipeline: list[_Exchange] = []  # a few at most: reading pauses behind the first (a deque is 760 bytes)
        # The edge bounds.
        self.awaiting_headers = True
        self.header_bytes = 0
        self.header_deadline: float | None = None  # loop time
        self.over_cap = False
        self.refused = False  # answered at the edge, or lingering before the close: input is dropped
        self.upgrading = False
        # Trailers: bytes read after the last chunk's header, counted against `max_header_bytes`.
        self.chunk_seq = 0  # chunk headers parsed on this connection
        self.bare_chunk = False  # the newest chunk header has no data yet (for the last chunk: its trailers)
        self.trailer_bytes = 0
        # Flow and lifetime.
        self.idle_deadline: float | None = None
        self.timer: asyncio.TimerHandle | None = None  # fires by the earlier deadline
        self.timer_at = 0.0
        self.read_paused = False
        self.write_paused = False
        self.drained: asyncio.Future[None] | None = None
        self.closing = False

    # --- asyncio.Protocol ---------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transport is no asyncio.Transport subclass
        connections = self.server.connections
        connections.add(self)
        self.over_cap = len(connections) > self.limits.max_connections
        self.local = _address(transport.get_extra_info("sockname"))
        self.peer = _address(transport.get_extra_info("peername"))
        _no_delay(transport)
        self._start_header_clock()

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self._stop_timer()
        active = self.active
        if active is not None:
            active.gone()
        self.pipeline.clear()
        self.parsing = None
        self.write_paused = False
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return  # lingering after an edge answer: what the client still sends is dropped
        self.idle_deadline = None
        if self.awaiting_headers:
            self.header_bytes += len(data)
            if self.header_deadline is None:
                self._start_header_clock()
        trailing = self.chunk_seq if self.bare_chunk else -1
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self.upgrading:
                self._hand_over()
            else:
                logger.warning("Unsupported upgrade request.")
            return
        except httptools.HttpParserError:
            if not self.refused:
                self._refuse(400, "Invalid HTTP request received.")
            return
        if self.awaiting_headers and self.header_bytes > self.limits.max_header_bytes:
            self._refuse(431, "Request header fields too large")
        elif trailing == self.chunk_seq and self.bare_chunk:
            # Still after the same bare chunk header: a data chunk's first byte would have been body,
            # so all of `data` was the last chunk's trailers (dropped, but held by the parser per line).
            self.trailer_bytes += len(data)
            if self.trailer_bytes > self.limits.max_header_bytes:
                self._refuse(431, "Request trailer fields too large")

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)

    def shutdown(self) -> None:
        """The server stops: close now if idle, else after the answer in flight."""
        self.closing = True
        if self.active is None:
            self.transport.close()
        else:
            self.active.keep_alive = False  # says `connection: close` if its head is still to go

    # --- httptools callbacks ------------------------------------------------------

    def on_message_begin(self) -> None:
        self.url = b""
        self.headers = []
        self.header_size = 0
        self.expect_continue = False
        self.trailer_bytes = 0

    def on_url(self, url: bytes) -> None:
        self.url += url
        self.header_size += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_continue = True
        self.headers.append((name, value))
        self.header_size += len(name) + len(value) + 4  # as `httpedge.answers.header_size` counts

    def on_headers_complete(self) -> None:
        self.awaiting_headers = False
        self.header_deadline = None
        self.header_bytes = 0
        if self.header_size > self.limits.max_header_bytes:
            self._refuse(431, "Request header fields too large")
        elif self.over_cap:
            self._refuse(503, "Too many connections", [(b"retry-after", str(self.limits.retry_after_s).encode())])
        if self.refused:
            raise _Refused
        headers = self.headers
        self.headers = _TRAILERS  # what the parser calls a header from now on is a trailer: dropped
        parser = self.parser
        if parser.should_upgrade() and self.server.websockets is not None and _asks_for_websocket(headers):
            self.headers = headers  # for the hand-over
            self.upgrading = True
            return
        version = parser.get_http_version()
        url = self.url
        if url[:1] == b"/" and url.find(b"#") < 0:  # not `b"#" in url`: on CPython 3.11 it raises a TypeError inside
            raw_path, _, query = url.partition(b"?")
        else:
            parsed = httptools.parse_url(url)
            raw_path, query = parsed.path, parsed.query or b""
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        scope = {
            "type": "http", "asgi": _ASGI, "http_version": version, "server": self.local, "client": self.peer,
            "scheme": "http", "method": parser.get_method().decode("ascii"), "root_path": "", "path": path,
            "raw_path": raw_path, "query_string": query, "headers": headers,
        }
        keep_alive = version != "1.0" and parser.should_keep_alive() and not self.closing
        exchange = _Exchange(self, scope, keep_alive, self.expect_continue)
        self.parsing = exchange
        if self.active is None:
            self._start(exchange)
        else:
            self.pipeline.append(exchange)
            self._pause_reading()

    def on_body(self, body: bytes) -> None:
        self.bare_chunk = False
        exchange = self.parsing
        if exchange is None or exchange.phase is _COMPLETE or self.upgrading:
            return  # answered already (or refused): the rest of the body is read and dropped
        exchange.chunks.append(body)
        exchange.buffered += len(body)
        if exchange.buffered > _HIGH_WATER:
            self._pause_reading()
        exchange.wake()

    def on_chunk_header(self) -> None:
        self.chunk_seq += 1
        self.bare_chunk = True

    def on_chunk_complete(self) -> None:
        self.bare_chunk = False

    def on_message_complete(self) -> None:
        self.awaiting_headers = True
        exchange = self.parsing
        if exchange is None or self.upgrading:
            return
        exchange.body = _ARRIVED
        exchange.wake()

    # --- exchanges ----------------------------------------------------------------

    def _start(self, exchange: _Exchange) -> None:
        self.active = exchange
        # Named, since a default name is formatted per task; leaves `tasks` itself when it ends.
        exchange.task = task = self.loop.create_task(exchange.run(self.app), name="http")
        self.server.tasks.add(task)

    def response_done(self, exchange: _Exchange) -> None:
        """`exchange`'s answer is complete: the next one in line, or wait idle for one."""
        self.active = None
        if exchange.body is _ARRIVING:
            self._linger()  # answered before the request was all read (its head said `connection: close`)
            return
        if not exchange.keep_alive or self.closing:
            self.transport.close()
            return
        if self.transport.is_closing():
            return
        if self.pipeline:
            self._start(self.pipeline.pop(0))
            if self.pipeline:
                return
        else:
            self.idle_deadline = self.loop.time() + self.limits.keep_alive_s
            self._wake_by(self.idle_deadline)
        self._resume_reading()

    def _pause_reading(self) -> None:
        if not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self.read_paused:
            self.read_paused = False
            self.transport.resume_reading()

    async def drain(self) -> None:
        """Until the transport's write buffer is below its low-water mark (or the client has gone)."""
        if self.drained is None or self.drained.done():
            self.drained = self.loop.create_future()
        await asyncio.shield(self.drained)

    def _wake_by(self, when: float) -> None:
        """Make sure the connection's timer fires no later than `when`."""
        if self.timer is None or self.timer_at > when:
            if self.timer is not None:
                self.timer.cancel()
            self.timer = self.loop.call_at(when, self._on_timer)
            self.timer_at = when

    def _stop_timer(self) -> None:
        self.header_deadline = self.idle_deadline = None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _on_timer(self) -> None:
        self.timer = None
        now = self.loop.time() + _TIMER_SLACK_S
        if self.idle_deadline is not None and now >= self.idle_deadline:
            self.idle_deadline = None
            self.transport.close()
            return
        if self.header_deadline is not None and now >= self.header_deadline:
            self._headers_too_slow()
        later = [d for d in (self.header_deadline, self.idle_deadline) if d is not None]
        if later:
            self._wake_by(min(later))

    # --- the edge bounds ----------------------------------------------------------

    def _start_header_clock(self) -> None:
        if not self.refused:
            self.header_deadline = self.loop.time() + self.limits.header_timeout_s
            self._wake_by(self.header_deadline)

    def _headers_too_slow(self) -> None:
        self.header_deadline = None
        if self.active is not None:
            self._start_header_clock()  # the previous answer is still being made: not the client's delay
        elif self.awaiting_headers and not self.refused:
            self._refuse(408, "Request headers not complete in time")

    def _refuse(self, status: int, text: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        active = self.active
        if active is not None and active.phase is _SENDING:
            # An answer is half written: ours cannot follow it, so the connection just ends.
            active.gone()
            self.refused = True
            self._stop_timer()
            self.pipeline.clear()
            self.transport.close()
            return
        if active is not None:
            active.gone()  # its answer could not follow ours on this connection
        self._linger(refusal(status, text, headers))

    def _linger(self, answer: bytes = b"") -> None:
        """End the connection after `answer`: input is read and dropped until the client closes or
        `httpedge.answers.LINGER_S` passes, so it reads what was written rather than a reset."""
        self.refused = True
        self._stop_timer()
        self.pipeline.clear()
        self._resume_reading()
        end_with(self.transport, answer)

    def _hand_over(self) -> None:
        assert self.server.websockets is not None
        self._stop_timer()
        self.server.connections.discard(self)
        request = [self.parser.get_method(), b" ", self.url, b" HTTP/1.1\r\n"]
        for name, value in self.headers:
            request += [name, b": ", value, b"\r\n"]
        request.append(b"\r\n")
        self.server.websockets.take(self.transport, b"".join(request))


class _Exchange:
    """One request and its answer: the app's `receive` and `send`."""

    __slots__ = ("conn", "scope", "keep_alive", "expect_continue", "chunks", "buffered", "body", "waiters", "phase",
                 "status", "headers", "chunked", "remaining", "bodiless", "task")

    def __init__(self, conn: _Connection, scope: Scope, keep_alive: bool, expect_continue: bool) -> None:
        self.conn = conn
        self.scope = scope
        self.keep_alive = keep_alive
        self.expect_continue = expect_continue
        self.chunks: list[bytes] = []
        self.buffered = 0
        self.body = _ARRIVING
        self.waiters: list[asyncio.Future[None]] | None = None
        self.phase = _WAITING
        self.status = 200
        self.headers: Any = ()
        self.chunked = False
        self.remaining = 0
        self.bodiless = False
        self.task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        waiters = self.waiters
        if waiters:
            self.waiters = None
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def gone(self) -> None:
        """The client left (or the connection was answered at the edge): no more reading or writing."""
        if self.phase is not _COMPLETE:
            self.phase = _GONE
        self.wake()

    async def run(self, app: App) -> None:
        try:
            await app(self.scope, self.receive, self.send)
        except asyncio.CancelledError:
            if self.phase is not _COMPLETE:
                self.conn.transport.close()
            raise
        except Exception:
            logger.exception("Exception in ASGI application")
            self._fail()
        else:
            if self.phase is _WAITING:
                logger.error("ASGI callable returned without starting response.")
                self._fail()
            elif self.phase is _HELD or self.phase is _SENDING:
                logger.error("ASGI callable returned without completing response.")
                self._fail()
        finally:
            self.conn.server.tasks.discard(self.task)

    def _fail(self) -> None:
        """A 500 if nothing of the answer went out yet; otherwise the connection is closed mid-answer."""
        if self.phase is _COMPLETE or self.phase is _GONE:
            return
        transport = self.conn.transport
        if self.phase is not _SENDING:
            transport.write(_INTERNAL_ERROR)
        self.phase = _COMPLETE
        self.wake()
        transport.close()
        self.conn.active = None

    async def receive(self) -> Message:
        if self.body is _ARRIVED and not self.chunks and self.phase is _WAITING and not self.conn.read_paused:
            # A request without a body (most are: a GET) asked for its one message: nothing to wait
            # for, to resume or to answer 100 Continue to. Its own short way: the general one below
            # was 1,300 of the 232,000 instructions of a noop GET through the proxy (`bench.proxy_cost`).
            self.body = _HANDED
            return {"type": "http.request", "body": b"", "more_body": False}
        if self.expect_continue:
            self.expect_continue = False
            if self.body is _ARRIVING and self.phase is _WAITING and not self.conn.transport.is_closing():
                self.conn.transport.write(_CONTINUE)
        while True:
            if self.phase is _COMPLETE or self.phase is _GONE:
                return {"type": "http.disconnect"}
            if self.chunks or self.body is _ARRIVED:
                chunks = self.chunks
                body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                self.chunks = []
                self.buffered = 0
                more_body = self.body is _ARRIVING
                if not more_body:
                    self.body = _HANDED
                conn = self.conn
                if conn.read_paused and not conn.pipeline:
                    conn._resume_reading()
                return {"type": "http.request", "body": body, "more_body": more_body}
            conn = self.conn
            if conn.read_paused and not conn.pipeline:
                conn._resume_reading()
            waiter = conn.loop.create_future()
            if self.waiters is None:
                self.waiters = [waiter]
            else:
                self.waiters.append(waiter)
            try:
                await waiter
            finally:
                if self.waiters is not None and waiter in self.waiters:
                    self.waiters.remove(waiter)

    async def send(self, message: Mapping[str, Any]) -> None:
        conn = self.conn
        if conn.write_paused and self.phase is not _GONE:
            await conn.drain()
        phase = self.phase
        if phase is _GONE:
            return
        kind = message["type"]
        if phase is _WAITING:
            if kind != "http.response.start":
                raise RuntimeError(f"Expected ASGI message 'http.response.start', but got '{kind}'.")
            self.phase = _HELD
            self.expect_continue = False
            self.status = message["status"]
            self.headers = message.get("headers", ())
            return  # the head goes out with the first body message
        if phase is _COMPLETE:
            raise RuntimeError(f"Unexpected ASGI message '{kind}' sent, after response already completed.")
        if kind != "http.response.body":
            raise RuntimeError(f"Expected ASGI message 'http.response.body', but got '{kind}'.")
        body = message.get("body", b"")
        more_body = message.get("more_body", False)
        if phase is _SENDING:
            out = self._frame(body, more_body)
            if out:
                conn.transport.write(out)
        else:
            head = self._head(body, more_body)
            self.phase = _SENDING
            out = self._frame(body, more_body)
            if len(out) > _JOINED_UP_TO:
                conn.transport.writelines((head, out))  # a large body is not copied behind its head
            else:
                conn.transport.write(head + out)
        if not more_body:
            if self.remaining and not self.bodiless:
                conn.transport.close()
                raise RuntimeError("Response content shorter than Content-Length")
            self.phase = _COMPLETE
            self.wake()
            conn.response_done(self)

    def _head(self, body: bytes, more_body: bool) -> bytes:
        status = self.status
        lines = []
        names = []
        values = []
        length = None
        close = False
        for name, value in self.headers:
            name = name.lower()
            if name == b"content-length":
                if length is None:
                    length = int(value)
            elif name == b"transfer-encoding":
                self.chunked = self.chunked or value.lower() == b"chunked"
            elif name == b"connection":
                if b"close" in [token.strip().lower() for token in value.split(b",")]:
                    close = True
            names.append(name)
            values.append(value)
            lines.append(b"%s: %s\r\n" % (name, value))
        if _NAME.fullmatch(b"".join(names)) is None or _BAD_VALUE.search(b"".join(values)) is not None:
            raise RuntimeError("Invalid HTTP header name or value.")
        block = b"".join(lines)
        extra = b""
        self.bodiless = self.scope["method"] == "HEAD" or status in (204, 304) or status < 200
        if self.chunked:
            length = None
        elif length is not None:
            self.remaining = length
        elif not self.bodiless:
            if more_body:
                self.chunked = True
                extra = _CHUNKED
            else:
                self.remaining = len(body)
                extra = b"content-length: %d\r\n" % len(body)
        if close:
            self.keep_alive = False
        elif not self.keep_alive or self.body is _ARRIVING:
            # An answer before the whole request was read ends the connection (`_Connection.response_done`).
            self.keep_alive = False
            extra += _CLOSE
        status_line = _STATUS_LINES.get(status) or _status_line(status)
        return status_line + _date() + block + extra + b"\r\n"

    def _frame(self, body: bytes, more_body: bool) -> bytes:
        if self.bodiless:
            return b""
        if self.chunked:
            if body:
                out = b"%x\r\n%s\r\n" % (len(body), body)
                return out + _LAST_CHUNK if not more_body else out
            return b"" if more_body else _LAST_CHUNK
        self.remaining -= len(body)
        if self.remaining < 0:
            self.conn.transport.close()
            raise RuntimeError("Response content longer than Content-Length")
        return body


def _no_delay(transport: asyncio.BaseTransport) -> None:
    """Nagle off, as asyncio does only for sockets made with proto=IPPROTO_TCP: a
    listening socket made as `socket.socket(family, SOCK_STREAM)` has proto 0,
    and its connections would hold each small write behind the client's
    delayed ACK (~40 ms per keep-alive answer written in more than one write)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _address(name: Any) -> tuple[str, int] | None:
    return (str(name[0]), int(name[1])) if isinstance(name, tuple) and len(name) >= 2 else None


def _asks_for_websocket(headers: list[tuple[bytes, bytes]]) -> bool:
    return any(name == b"upgrade" and value.lower() == b"websocket" for name, value in headers)
