"""The replica's end of the data path: frames over a private Unix socket, and over TCP.

Proxies send requests here instead of as Ray actor calls
(`proxy.pool.socketcalls`), which saves Ray's per-call machinery on both sides;
Ray stays the control plane and the fallback. `DataSocket` listens on
`<private dir>/data.sock` for a proxy on this node: the directory is made by
this user with mode 0700 (under this user's private base,
`datalink.private_dirs`, else the system temp dir), the socket is mode 0600, and a connecting peer whose SO_PEERCRED uid is
not ours is refused before any byte of it is read (`datalink.peers`) — the
frames carry pickles, so only our own user may write them. For proxies on
other nodes it also listens on TCP (`start_tcp`) at the node's address (never
a wildcard) on a port the kernel picks; a TCP peer must prove within
`HANDSHAKE_TIMEOUT_S` that it knows the secret this `DataSocket` made at
start (`datalink.handshake`) — until then none of its bytes reaches a
decoder, and a peer that fails is closed. At most `MAX_UNPROVEN` peers may
be proving themselves at once (more are closed as they connect), and
failures are logged at most once a minute with their count and the latest
peer's address (never the secret): a flood or a port scan neither holds the
listener nor fills the log. The secret leaves only in `address()`, which the replica
answers over Ray. TCP frames are authenticated, not encrypted.

Each call runs as its own task through the same code the Ray methods use
(`Serving`: the replica's `handle_request` and `handle_batch`); a CANCEL frame cancels its task, which cancels the user
code as a cancelled Ray call would. A streaming answer's head comes back
here as a `StreamStart`; an UPLOAD (a request whose body is above
`datalink.frames.PIECES_ABOVE`) starts its task once its BODY pieces
have all come, read straight into one buffer of the announced size that
becomes the body uncopied (`sink`, into `datalink.frames.Pieces`); a CANCEL
drops a half-arrived one. A plain reply whose body is above `PIECES_ABOVE`
goes back the same way: an ANSWER (its status, headers and size), then its
body's BODY pieces, each written as the connection drains
(`FrameConnection.write_pieces`), never pickled. A STREAM frame then claims
its rest and the chunks go out as ITEM frames, then END (or ERROR when the handler raised). A
WebSocket is a WEBSOCKET frame: what the app sends goes out as ITEMs the same
way, and what the client sends comes in as PUSH calls. Both are pushed only
as far ahead as the proxy's window allows (`datalink.frames.Window`,
replenished by its CREDIT frames), so a slow client pauses the producer; a
CANCEL stops the user's generator. A reply too large for one frame is held
and streamed the same way (`hold`), so no answer is ever too big for this
path. A malformed
frame closes its connection (the proxy then treats the replica as died and
falls back to Ray); a connection that closes cancels its calls, since
nobody is left to answer.

Not here: the frame format (`datalink.frames`), the replica's methods
(`replica.host`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import shutil
import socket
import tempfile
import time
import traceback
from dataclasses import dataclass
from typing import Any, AsyncGenerator, Awaitable, Callable, Coroutine

from datalink.connection import FrameConnection
from datalink.frames import (
    MAX_FRAME_BYTES,
    PIECES_ABOVE,
    Frame,
    Kind,
    Opening,
    Pieces,
    Window,
    encode,
    item_bytes,
)
from vocabulary.request_path.wire import DataAddress
from datalink.handshake import Handshake, Role, new_secret
from datalink.peers import peer_allowed, peer_uid
from vocabulary.spec.endpoints import MAX_BODY_BYTES_CEILING
from vocabulary.request_path.wire import TimedRequest, CallOutcome, CallResult, Reply, StreamStart, WireRequest

__all__ = ["DataSocket", "Serving", "socket_dir", "SUN_PATH_MAX"]

logger = logging.getLogger(__name__)

# sun_path holds 108 bytes on Linux, its terminating NUL included.
SUN_PATH_MAX = 107
_SOCKET_NAME = "data.sock"
# How long a TCP peer may take to prove itself before it is closed: a proxy
# answers within a round trip, so two seconds is generous even across a cluster.
HANDSHAKE_TIMEOUT_S = 2.0
# TCP peers still proving themselves at once; more are closed as they connect.
MAX_UNPROVEN = 32
# Failed handshakes are logged at most once per this many seconds, with their count.
_REFUSALS_LOG_EVERY_S = 60.0


@dataclass(frozen=True)
class Serving:
    """What the replica answers frames with: the code paths of its Ray methods."""

    one: Callable[[WireRequest], Awaitable[Reply]]
    batch: Callable[[list[TimedRequest]], Awaitable[list[CallResult]]]
    # A response too large for one frame: its status, headers and body, held as a stream.
    hold: Callable[[int, list[tuple[bytes, bytes]], bytes], StreamStart]
    # A held stream's rest, by id (raises inside when it is not held); letting one go unread.
    stream: Callable[[str], AsyncGenerator[bytes, None]]
    close_stream: Callable[[str], None]
    # A WebSocket's app: what it sends; and one message from its client (False: no such socket).
    websocket: Callable[[str, WireRequest], AsyncGenerator[dict[str, Any], None]]
    websocket_message: Callable[[str, dict[str, Any]], Awaitable[bool]]
    # An ERROR frame's text (a user code's traceback) as it may leave: the replica's secrets masked.
    redact: Callable[[str], str] = str


def socket_dir(bases: list[str]) -> str | None:
    """A fresh private directory (mode 0700) under the first base whose socket
    path fits sun_path; None when none fits or none can be made."""
    for base in bases:
        if len(os.path.join(base, "rgd-XXXXXXXX", _SOCKET_NAME).encode()) > SUN_PATH_MAX:
            continue
        try:
            # mkdtemp creates it 0700 and owned by us, under a name nobody could claim first.
            return tempfile.mkdtemp(prefix="rgd-", dir=base)
        except OSError as error:
            logger.warning("no data socket directory under %s: %s", base, error)
    return None


class DataSocket:
    """Listens on one Unix socket (and on TCP for other nodes) and serves every connection's frames."""

    def __init__(
        self,
        serving: Serving,
        max_frame: int = MAX_FRAME_BYTES,
        handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S,
        max_unproven: int = MAX_UNPROVEN,
    ) -> None:
        self._serving = serving
        self._max_frame = max_frame
        self._handshake_timeout_s = handshake_timeout_s
        self._max_unproven = max_unproven
        self.unproven = 0  # TCP connections still in their handshake
        self.refusals = _Refusals()
        self._server: asyncio.AbstractServer | None = None
        self._tcp_server: asyncio.AbstractServer | None = None
        self._dir: str | None = None
        self._secret = new_secret()  # handed out only in `address()`, over Ray
        self.path: str | None = None
        self.tcp: tuple[str, int] | None = None
        self.served = 0  # requests answered over the socket (a batch counts each of its items)
        self.streamed = 0  # streams and WebSockets whose items went out over the socket
        self.accepted = {"unix": 0, "tcp": 0}  # connections served, TCP ones once they proved themselves
        self._connections: set[_ProxyConnection] = set()
        self._stopped = False  # stop_listening was called: nothing listens again

    def __repr__(self) -> str:
        return f"DataSocket(path={self.path!r}, tcp={self.tcp!r})"  # never the secret

    def address(self, node: str) -> DataAddress | None:
        """Where a proxy finds this replica's frames (the secret included: for Ray's eyes only); None when nowhere."""
        if self.path is None and self.tcp is None:
            return None
        return DataAddress(node, self.path, self.tcp, self._secret if self.tcp is not None else b"")

    @staticmethod
    def supported() -> bool:
        return hasattr(socket, "AF_UNIX") and hasattr(socket, "SO_PEERCRED")

    async def start(self, bases: list[str]) -> str | None:
        """Listen in a new private directory under the first fitting base; the path, or None."""
        if self.path is not None:
            return self.path
        if not self.supported():
            return None
        directory = socket_dir(bases)
        if directory is None:
            return None
        path = os.path.join(directory, _SOCKET_NAME)
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                # Bound and chmod-ed before listen(): nobody can connect in between,
                # and the directory keeps everyone else out anyway.
                sock.bind(path)
                os.chmod(path, 0o600)
                sock.listen(1024)
                sock.setblocking(False)
                self._server = await asyncio.get_running_loop().create_unix_server(self._connection, sock=sock)
            except BaseException:
                sock.close()
                raise
        except OSError as error:
            logger.warning("the data socket %s could not listen, requests come over Ray: %s", path, error)
            shutil.rmtree(directory, ignore_errors=True)
            return None
        self._dir, self.path = directory, path
        return path

    async def start_tcp(self, host: str) -> tuple[str, int] | None:
        """Listen on TCP at `host` (this node's address as Ray knows it, never
        a wildcard), on a port the kernel picks; `(host, port)`, or None."""
        if self.tcp is not None:
            return self.tcp
        if self._stopped:
            return None  # draining: no new way in
        try:
            if ipaddress.ip_address(host).is_unspecified:
                raise ValueError("a wildcard address would listen on every interface")
        except ValueError as error:
            logger.warning("no TCP data socket at %r, other nodes' proxies call over Ray: %s", host, error)
            return None
        try:
            server = await asyncio.get_running_loop().create_server(
                lambda: _ProxyConnection(self, Handshake(Role.REPLICA, self._secret)), host, 0, backlog=1024
            )
        except OSError as error:
            logger.warning("no TCP data socket at %s, other nodes' proxies call over Ray: %s", host, error)
            return None
        self._tcp_server = server
        self.tcp = (host, int(server.sockets[0].getsockname()[1]))
        return self.tcp

    def stop_listening(self) -> None:
        """No new connections; the socket and its directory are removed, the TCP listener closed.

        Connections already open keep being served: a proxy may still send
        requests until it learns this replica is leaving, and those are served.
        """
        self._stopped = True
        for server in (self._server, self._tcp_server):
            if server is not None:
                server.close()
        self._server = self._tcp_server = None
        self.tcp = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        self.path = None

    def calls_in_flight(self) -> int:
        """Calls and streams held on all connections: started, or cancelled and not yet ended."""
        return sum(len(connection._calls) for connection in self._connections)

    def close(self) -> None:
        """Stop listening and drop every connection (their calls are cancelled)."""
        self.stop_listening()
        for connection in list(self._connections):
            connection.close("the replica closed its data socket")

    def _connection(self) -> _ProxyConnection:
        return _ProxyConnection(self, None)


class _ProxyConnection(FrameConnection):
    """One proxy's connection: frames in, one task per call, replies out.

    Over TCP (`handshake` given), nothing is decoded until the peer has
    proven itself (`datalink.handshake`) within the handshake timeout."""

    def __init__(self, owner: DataSocket, handshake: Handshake | None) -> None:
        super().__init__(owner._max_frame, handshake)
        self._owner = owner
        self._deadline: asyncio.TimerHandle | None = None
        self._peer = "a Unix socket peer"
        self._aborted = False
        self._counted = False  # one of the owner's `unproven`
        self._calls: dict[int, asyncio.Task[None]] = {}
        self._credits: dict[int, _Credit] = {}
        self._uploads: dict[int, _Upload] = {}  # calls whose body is still arriving

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self._handshake is not None:
            self._peer = f"TCP peer {transport.get_extra_info('peername')!r}"
            if self._owner.unproven >= self._owner._max_unproven:
                # Held by nobody: a flood of silent peers costs one refusal each, not a connection slot.
                self._aborted = True
                transport.abort()  # type: ignore[attr-defined]  # a stream's transport has abort(); the base type does not say so
                self._owner.refusals.note(self._peer, f"{self._owner.unproven} connections were still proving themselves")
                return
            self._owner.unproven += 1
            self._counted = True
            self._owner._connections.add(self)
            self._deadline = self._loop.call_later(
                self._owner._handshake_timeout_s, self.close, "it did not complete the handshake in time"
            )
            return
        try:
            uid = peer_uid(transport.get_extra_info("socket"))
        except OSError as error:
            logger.warning("data socket: refused a peer whose credentials could not be read: %s", error)
            transport.abort()  # type: ignore[attr-defined]  # a stream's transport has abort(); the base type does not say so
            return
        if not peer_allowed(uid, os.getuid()):
            logger.warning("data socket: refused a peer with uid %d (only uid %d may connect)", uid, os.getuid())
            transport.abort()  # type: ignore[attr-defined]  # a stream's transport has abort(); the base type does not say so
            return
        self._owner._connections.add(self)
        self._owner.accepted["unix"] += 1

    def on_proven(self) -> None:
        self._uncount()
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._owner.accepted["tcp"] += 1

    def on_frame(self, frame: Frame) -> None:
        """One frame from the proxy: each kind has one payload shape, and
        anything else (another kind, another shape) closes the connection."""
        call_id = frame.call_id
        serving = self._owner._serving
        match frame:
            case Frame(kind=Kind.REQUEST, payload=tuple() as request):
                self._start(call_id, self._answer(call_id, request))
            case Frame(kind=Kind.UPLOAD, payload=(str(), str(), bytes(), list(), int() as size) as head) if (
                PIECES_ABOVE < size <= MAX_BODY_BYTES_CEILING and call_id not in self._uploads
                and call_id not in self._calls
            ):
                self._uploads[call_id] = _Upload(head, size)
            case Frame(kind=Kind.BODY, payload=bytes() | int() as piece) if call_id in self._uploads:
                self._take_piece(call_id, piece)
            case Frame(kind=Kind.BATCH, payload=list() as items):
                self._start(call_id, self._answer_all(call_id, items))
            case Frame(kind=Kind.STREAM, payload=Opening(target=str() as stream_id, window=Window() as window)):
                self._open(call_id, window, lambda: serving.stream(stream_id))
            case Frame(
                kind=Kind.WEBSOCKET,
                payload=Opening(target=(str() as websocket_id, tuple() as request), window=Window() as window),
            ):
                self._open(call_id, window, lambda: serving.websocket(websocket_id, request))
            case Frame(kind=Kind.PUSH, payload=(str() as websocket_id, dict() as message)):
                # Answered once the app has room for it; the proxy sends a WebSocket's next message only then.
                self._start(call_id, self._push(call_id, websocket_id, message))
            case Frame(kind=Kind.CREDIT, payload=(int() as items, int() as size)) if _counts(items, size):
                credit = self._credits.get(call_id)
                if credit is not None:  # else: its stream ended meanwhile
                    credit.grant(items, size)
            case Frame(kind=Kind.DISCARD, payload=str() as stream_id):
                serving.close_stream(stream_id)
            case Frame(kind=Kind.CANCEL, payload=None):
                self._uploads.pop(call_id, None)  # its body's pieces stop here
                # Forgotten here: a call cancelled before it ran never reaches its own `finally`.
                task = self._calls.pop(call_id, None)
                if task is not None:
                    self._credits.pop(call_id, None)
                    task.cancel()
            case _:
                self.close(f"a {frame.kind.name} frame with {_shown(frame.payload)}")

    def sink(self, call_id: int, size: int) -> memoryview | None:
        """An upload's next piece goes straight into its body."""
        upload = self._uploads.get(call_id)
        return None if upload is None else upload.body.room(size)

    def _take_piece(self, call_id: int, piece: bytes | int) -> None:
        """The next piece of an upload's body; with its last, the call starts."""
        upload = self._uploads[call_id]
        if self.took_last_piece(call_id, upload.body, piece):
            del self._uploads[call_id]
            method, path, query, headers, _ = upload.head
            self._start(call_id, self._answer(call_id, (method, path, query, headers, upload.body.body())))

    def _start(self, call_id: int, call: Coroutine[Any, Any, None]) -> None:
        """Run one call as its own task; it forgets itself as it ends (no done
        callback: one scheduled callback less per request). Named: a task left
        unnamed has a name formatted for it (1,450 instructions a call)."""
        if call_id in self._calls:
            call.close()
            self.close(f"call id {call_id} is already in flight")
            return
        self._calls[call_id] = self._loop.create_task(call, name="call")

    def _open(self, call_id: int, window: Window, items: Callable[[], AsyncGenerator[Any, None]]) -> None:
        """Push what `items()` yields as ITEM frames, within `window` and the proxy's credit."""
        if call_id in self._calls:
            self.close(f"call id {call_id} is already in flight")
            return
        self._credits[call_id] = _Credit(window)
        task = self._loop.create_task(self._generate(call_id, items()), name="stream")
        task.add_done_callback(lambda _: self._ended(call_id))
        self._calls[call_id] = task

    def _ended(self, call_id: int) -> None:
        self._calls.pop(call_id, None)
        self._credits.pop(call_id, None)  # a stream cancelled before it ever ran included

    async def _generate(self, call_id: int, items: AsyncGenerator[Any, None]) -> None:
        """Push `items` as ITEM frames, within the proxy's credit, then END or ERROR."""
        credit = self._credits[call_id]
        self._owner.streamed += 1
        try:
            while True:
                # Room first, then the next item: a proxy that reads nothing pauses the producer,
                # and so does a connection whose buffer is full (the item waits here, in its
                # producer, not in the transport's buffer in front of every other stream's).
                await credit.room()
                await self.writable()
                try:
                    item = await anext(items)
                except StopAsyncIteration:
                    break
                credit.sent(item_bytes(item))
                if not self._send(Kind.ITEM, call_id, item):
                    return  # an ERROR went instead: the stream ends there
            self._send(Kind.END, call_id, None)
        except asyncio.CancelledError:
            raise  # a CANCEL frame or a closed connection: nobody reads on
        except Exception:  # noqa: BLE001 — user code may raise anything; the proxy logs it
            self._send(Kind.ERROR, call_id, traceback.format_exc())
        finally:
            self._credits.pop(call_id, None)
            await items.aclose()  # stops the user's generator when it did not finish

    async def _answer(self, call_id: int, request: WireRequest) -> None:
        try:
            reply = self._fitted(await self._owner._serving.one(request), self._owner._max_frame // 2)
            self._owner.served += 1
            if isinstance(reply, tuple) and len(reply[2]) > PIECES_ABOVE:
                status, headers, body = reply
                if self._send(Kind.ANSWER, call_id, (status, headers, len(body))):
                    await self.write_pieces(call_id, body, self._closing)
            else:
                self._send(Kind.RESULT, call_id, reply)
        except asyncio.CancelledError:
            raise  # a CANCEL frame or a closed connection: nobody waits for an answer
        except Exception:  # noqa: BLE001 — user code may raise anything; the proxy logs it
            self._send(Kind.ERROR, call_id, traceback.format_exc())
        finally:
            self._calls.pop(call_id, None)

    async def _push(self, call_id: int, websocket_id: str, message: dict[str, Any]) -> None:
        try:
            self._send(Kind.RESULT, call_id, bool(await self._owner._serving.websocket_message(websocket_id, message)))
        finally:
            self._calls.pop(call_id, None)

    async def _answer_all(self, call_id: int, items: list[TimedRequest]) -> None:
        try:
            results = await self._owner._serving.batch(items)
            self._owner.served += len(items)
            budget = self._owner._max_frame // (2 * max(len(results), 1))
            self._send(Kind.RESULTS, call_id, [self._fitted_result(result, budget) for result in results])
        except asyncio.CancelledError:
            raise  # a CANCEL frame or a closed connection: nobody waits for an answer
        except Exception:  # noqa: BLE001 — user code may raise anything; the proxy logs it
            self._send(Kind.ERROR, call_id, traceback.format_exc())
        finally:
            self._calls.pop(call_id, None)

    def _fitted(self, reply: Reply, budget: int) -> Reply:
        """`reply`, or a body larger than `budget` held as a stream the proxy pulls over Ray."""
        if isinstance(reply, tuple) and len(reply[2]) > budget:
            status, headers, body = reply
            return self._owner._serving.hold(status, headers, body)
        return reply

    def _fitted_result(self, result: CallResult, budget: int) -> CallResult:
        outcome, value = result
        if outcome == CallOutcome.OK:
            return outcome, self._fitted(value, budget)
        return result

    def _closing(self) -> bool:
        """Whether nothing more can be sent (the connection is gone or going)."""
        return self._transport is None or self._transport.is_closing()

    def _send(self, kind: Kind, call_id: int, payload: Any) -> bool:
        """Queue one frame; False when an ERROR frame had to go instead (or nothing could)."""
        if self._closing():
            return False
        sent = True
        if kind is Kind.ERROR and isinstance(payload, str):
            payload = self._owner._serving.redact(payload)
        try:
            frame = encode(kind, call_id, payload)
        except Exception:  # noqa: BLE001 — e.g. an unpicklable value in a handler's headers
            frame = encode(Kind.ERROR, call_id, f"the reply could not be framed:\n{traceback.format_exc()}")
            sent = False
        if len(frame) - 4 > self._owner._max_frame:
            # Headers alone past the bound: too big for this path, and an error is better than a stuck call.
            frame = encode(Kind.ERROR, call_id, f"a reply of {len(frame)} bytes is too large for the data socket")
            sent = False
        self.write(frame)  # replies finishing in one loop iteration leave in one write
        return sent

    def close(self, reason: str) -> None:
        if self._handshake is not None:
            self._owner.refusals.note(self._peer, reason)  # anyone may knock: counted, not logged per peer
        else:
            logger.warning("data socket: closing the connection of %s: %s", self._peer, reason)
        self._aborted = True
        if self._transport is not None:
            self._transport.abort()

    def _uncount(self) -> None:
        if self._counted:
            self._counted = False
            self._owner.unproven -= 1

    def connection_lost(self, exc: Exception | None) -> None:
        self._uncount()
        if self._handshake is not None:
            if not self._aborted:
                self._owner.refusals.note(self._peer, "it left before proving itself")
        self._owner._connections.discard(self)
        self._transport = None
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        for task in list(self._calls.values()):
            task.cancel()
        self._calls.clear()


class _Upload:
    """An UPLOAD's head and its body so far."""

    __slots__ = ("head", "body")

    def __init__(self, head: tuple[str, str, bytes, list[tuple[bytes, bytes]], int], size: int) -> None:
        self.head = head
        self.body = Pieces(size)


class _Refusals:
    """TCP peers that did not prove themselves, logged at most once per
    `every_s` with how many there were: a scan or a flood is one line a
    minute, not one per connection."""

    def __init__(self, every_s: float = _REFUSALS_LOG_EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._every_s = every_s
        self._clock = clock
        self._next_log = 0.0
        self._unlogged = 0
        self.total = 0

    def note(self, peer: str, reason: str) -> None:
        self.total += 1
        self._unlogged += 1
        now = self._clock()
        if now < self._next_log:
            return
        logger.warning(
            "data socket: refused %d TCP peer(s) that did not prove they know the secret; the latest, %s: %s",
            self._unlogged, peer, reason,
        )
        self._unlogged = 0
        self._next_log = now + self._every_s


def _counts(*numbers: int) -> bool:
    """Whether a CREDIT's numbers are counts (not negative, not booleans)."""
    return all(type(number) is int and number >= 0 for number in numbers)


def _shown(payload: Any) -> str:
    """A malformed payload for the log: its repr, cut short."""
    shown = repr(payload)
    return shown if len(shown) <= 200 else shown[:200] + "..."


class _Credit:
    """What one stream may still send: its window less what the proxy has not acknowledged."""

    # A future made only while the stream waits for room, not an `asyncio.Event` (whose deque of
    # waiters is 760 bytes) held by every open stream.
    __slots__ = ("_window", "_items", "_bytes", "_room")

    def __init__(self, window: Window) -> None:
        self._window = window
        self._items = 0
        self._bytes = 0
        self._room: asyncio.Future[None] | None = None  # the sender, waiting for room

    def _full(self) -> bool:
        # Always room for one item, however large: nothing else could ever move it.
        return self._items > 0 and (self._items >= self._window.items or self._bytes >= self._window.bytes)

    def sent(self, size: int) -> None:
        self._items += 1
        self._bytes += size

    def grant(self, items: int, size: int) -> None:
        self._items = max(0, self._items - items)
        self._bytes = max(0, self._bytes - size)
        room = self._room
        if room is not None and not room.done() and not self._full():
            room.set_result(None)

    async def room(self) -> None:
        while self._full():
            if self._room is None or self._room.done():
                self._room = asyncio.get_running_loop().create_future()
            await self._room
