"""Calls to replicas as frames over one persistent connection each.

A Ray actor call costs the proxy and the replica far more than the request
it carries (submitting, the task loop, serialisation, core-worker threads).
Instead, `DataConnections` keeps one persistent connection per replica
(`ReplicaConnection`) and multiplexes every call to it as `datalink.frames`
frames (served by `replica.data_socket`): the replica's private Unix socket
when it is on the proxy's own node, its TCP listener (`connect_tcp`,
TCP_NODELAY) when it is on another. Whoever calls asks for the connection
first and calls another way (Ray, `proxy.pool.replica_calls`) when there is none.

Per replica handle it asks, in the background, for the replica's
`DataAddress` (over Ray); until that answer comes, when the replica has no
way in for us (draining, no socket, no TCP listener), or while a connection
cannot be made, `connection(handle)` is None. A lost connection (EOF, a
reset, a malformed frame) fails every call pending on it with
`ReplicaDiedError`, so the proxy's retry and 502 semantics are unchanged;
the replica is then not connected until a back-off has passed (0.1 s,
doubling per failure in a row up to 5 s; a connection that lasted that long
starts it over), when the next look asks again and connects in the
background, so a dead replica is not hammered. A replica that leaves the
table (its handle is dropped) is forgotten, and its connection closed. A
cancelled call sends a CANCEL frame, which cancels the handler on the
replica. A request body above `datalink.frames.PIECES_ABOVE` is
uploaded in pieces, each written once the connection has drained the
previous ones, so the proxy holds the body once, not again in the
transport's buffer; a reply whose body is above it comes back the same way
(an ANSWER, then its BODY pieces), read straight into one buffer of the
announced size that becomes the body uncopied (`sink`, into
`datalink.frames.Pieces`; a body in one piece is that piece). Frames written in one loop iteration
leave in one write (`datalink.connection`). Replies are unpickled, so a Unix socket's peer must
be our own OS user (SO_PEERCRED), and a TCP peer must first prove it knows
the replica's secret, which only Ray told us (`datalink.handshake`; nothing
is decoded before).

A streaming answer's rest and a WebSocket travel on the connection too (a
STREAM or WEBSOCKET call whose items the replica pushes; PUSH calls carry what
a WebSocket's client sends). The proxy grants credit for items as its
consumer takes the next one — that is, once the previous one went to the
client — so the replica is never more than a `Window` ahead of a slow
client. Leaving the iterator early sends a CANCEL, which stops the user's
generator; a lost connection ends it with `ReplicaDiedError`.

No Ray here: the node id, the address lookup and the clock are injected
(`proxy.shell.raycalls` passes Ray's).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
import weakref
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
from vocabulary.control.actor_apis import ReplicaHandle
from vocabulary.request_path.wire import DataAddress
from datalink.handshake import Handshake, Role
from datalink.peers import peer_allowed, peer_uid
from proxy.pool.calling import HandlerError, ReplicaDiedError
from vocabulary.request_path.wire import TimedRequest, CallResult, Reply, StreamStart, WireRequest

__all__ = ["Address", "DataConnections", "ReplicaConnection", "connect", "connect_tcp"]

logger = logging.getLogger(__name__)

_CONNECT_TIMEOUT_S = 5.0  # the TCP handshake included
_ASK_TIMEOUT_S = 30.0
# After a lost connection (or a failed attempt), the next one waits this long,
# doubling per consecutive failure up to the cap: a dead replica is not hammered.
_BACKOFF_FIRST_S = 0.1
_BACKOFF_MAX_S = 5.0

# A replica's data address, or None (it serves no frames).
Address = DataAddress | None


class _Flow:
    """One STREAM or WEBSOCKET call's items as they arrive, and how it ended."""

    __slots__ = ("window", "items", "outcome", "waiter", "unacked", "owed_items", "owed_bytes")

    def __init__(self, window: Window) -> None:
        self.window = window
        self.items: list[Any] = []  # at most its window's items (an empty deque is 760 bytes a stream)
        self.outcome: BaseException | None = None  # StopAsyncIteration: it completed
        self.waiter: asyncio.Future[None] | None = None
        self.unacked = 0  # items received and not yet credited back
        self.owed_items = 0  # items passed on, to credit
        self.owed_bytes = 0

    def put(self, item: Any) -> bool:
        """One more item; False when the replica sent past its window."""
        self.items.append(item)
        self.unacked += 1
        self._wake()
        return self.unacked <= self.window.items

    def finish(self, outcome: BaseException) -> None:
        if self.outcome is None:
            self.outcome = outcome
            self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


class ReplicaConnection(FrameConnection):
    """One connection to one replica: calls out by id, replies matched back."""

    def __init__(
        self, name: str, max_frame: int = MAX_FRAME_BYTES, handshake: Handshake | None = None, window: Window = Window()
    ) -> None:
        """With a `handshake` (TCP), nothing is sent or decoded before the
        replica has proven itself: `proven` says whether it did, once known.
        `window` bounds how far ahead of its client a stream's replica may push."""
        super().__init__(max_frame, handshake)
        self.name = name
        self.max_frame = max_frame
        self.window = window
        self.via = "unix" if handshake is None else "tcp"
        self.proven: asyncio.Future[bool] = self._loop.create_future()
        if handshake is None:
            self.proven.set_result(True)
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._flows: dict[int, _Flow] = {}
        self._answers: dict[int, _Answer] = {}  # pending calls whose reply's body is arriving in pieces
        self.lost: str | None = None  # why the connection ended, once it did

    @property
    def open(self) -> bool:
        return self.lost is None and self._transport is not None and self._handshake is None

    def frame(self, kind: Kind, payload: Any) -> tuple[int, bytes] | None:
        """A new call's id and frame; None when it is too large for the replica to accept."""
        call_id = next(self._ids)
        frame = encode(kind, call_id, payload)
        return (call_id, frame) if len(frame) - 4 <= self.max_frame else None

    async def send(self, call_id: int, frame: bytes) -> Any:
        """Send one call (from `frame`) and await its reply; raises
        ReplicaDiedError or HandlerError; cancelling it cancels the call."""
        if not self.open:
            raise ReplicaDiedError(f"the data connection to {self.name} is closed: {self.lost}")
        self.write(frame)
        future: asyncio.Future[Any] = self._loop.create_future()
        self._pending[call_id] = future
        try:
            return await future
        except asyncio.CancelledError:
            self._cancel(call_id)
            raise

    def _cancel(self, call_id: int) -> None:
        """A call nobody awaits any more: the replica stops it, and what it still sends is dropped."""
        self._answers.pop(call_id, None)
        if self._pending.pop(call_id, None) is not None and self.open:
            self.write(encode(Kind.CANCEL, call_id))

    async def items(self, call_id: int, frame: bytes, window: Window) -> AsyncGenerator[Any, None]:
        """A STREAM or WEBSOCKET call (from `frame`, sent at the first `anext`):
        its items as the replica pushes them. What was passed on is credited
        back once it is half the window; leaving early cancels the call on the replica.
        Raises ReplicaDiedError or HandlerError."""
        if not self.open:
            raise ReplicaDiedError(f"the data connection to {self.name} is closed: {self.lost}")
        flow = self._flows[call_id] = _Flow(window)
        self.write(frame)
        ended = False
        try:
            while True:
                if not flow.items:
                    if flow.outcome is not None:
                        ended = True
                        if isinstance(flow.outcome, StopAsyncIteration):
                            return
                        raise flow.outcome
                    # Nothing to pass on, and nothing to credit yet: what was passed on and not
                    # credited is under half the window (below), so the replica has room to go on.
                    # A credit here went back for every item of a slow stream (one frame each way
                    # per server-sent event).
                    flow.waiter = self._loop.create_future()
                    try:
                        await flow.waiter
                    finally:
                        flow.waiter = None
                    continue
                item = flow.items.pop(0)
                yield item
                # Asked for the next one: the consumer has passed this one on.
                flow.owed_items += 1
                flow.owed_bytes += item_bytes(item)
                if 2 * flow.owed_items >= window.items or 2 * flow.owed_bytes >= window.bytes:
                    self._credit(call_id, flow)
        finally:
            self._flows.pop(call_id, None)
            if not ended and self.open:
                self.write(encode(Kind.CANCEL, call_id))

    def _credit(self, call_id: int, flow: _Flow) -> None:
        if flow.owed_items and self.open:
            self.write(encode(Kind.CREDIT, call_id, (flow.owed_items, flow.owed_bytes)))
            flow.unacked -= flow.owed_items
            flow.owed_items = flow.owed_bytes = 0

    def tell(self, kind: Kind, payload: Any) -> bool:
        """Send a frame nothing answers; False when the connection is closed or it is too large."""
        framed = self.frame(kind, payload)
        if framed is None or not self.open:
            return False
        self.write(framed[1])
        return True

    # --- the calls: each None when its frame would be too large for the replica

    def request(self, request: WireRequest) -> Coroutine[Any, Any, Reply] | None:
        """One request's call; a body above `PIECES_ABOVE` is uploaded in pieces."""
        body = request[4]
        if len(body) > PIECES_ABOVE:
            framed = self.frame(Kind.UPLOAD, (*request[:4], len(body)))
            return None if framed is None else self._upload(*framed, body)
        framed = self.frame(Kind.REQUEST, request)
        return None if framed is None else self.send(*framed)

    async def _upload(self, call_id: int, frame: bytes, body: bytes) -> Reply:
        """An UPLOAD call: its head, then its body's pieces, each written once the
        previous ones have drained (the transport never holds a second copy of
        the body), then its reply. Cancelling it stops the pieces and cancels the call."""
        if not self.open:
            raise ReplicaDiedError(f"the data connection to {self.name} is closed: {self.lost}")
        future: asyncio.Future[Any] = self._loop.create_future()
        self._pending[call_id] = future
        try:
            self.write(frame)
            # Stopped early when the connection was lost (or the replica answered early).
            await self.write_pieces(call_id, body, future.done)
            return await future
        except asyncio.CancelledError:
            self._cancel(call_id)
            raise

    def batch(self, items: list[TimedRequest]) -> Coroutine[Any, Any, list[CallResult]] | None:
        """One call of a batched handler with `items`."""
        framed = self.frame(Kind.BATCH, items)
        return None if framed is None else self._results(framed, len(items))

    async def _results(self, framed: tuple[int, bytes], count: int) -> list[CallResult]:
        results = await self.send(*framed)
        if not isinstance(results, list) or len(results) != count:
            self.close(f"a call of {count} requests answered with something else")
            raise ReplicaDiedError(f"replica {self.name} answered a batch with the wrong number of results")
        return results

    def stream(self, start: StreamStart) -> AsyncGenerator[bytes, None] | None:
        """A streaming answer's rest."""
        framed = self.frame(Kind.STREAM, Opening(start.stream_id, self.window))
        return None if framed is None else self.items(*framed, self.window)

    def discard(self, start: StreamStart) -> bool:
        """Let a stream go unread; False when it could not be said."""
        return self.tell(Kind.DISCARD, start.stream_id)

    def open_websocket(self, websocket_id: str, request: WireRequest) -> AsyncGenerator[dict[str, Any], None] | None:
        """What a WebSocket's app sends."""
        framed = self.frame(Kind.WEBSOCKET, Opening((websocket_id, request), self.window))
        return None if framed is None else self.items(*framed, self.window)

    def push(self, websocket_id: str, message: dict[str, Any]) -> Coroutine[Any, Any, bool] | None:
        """One message from a WebSocket's client; the call answers False when the replica no longer holds it."""
        framed = self.frame(Kind.PUSH, (websocket_id, message))
        return None if framed is None else self._pushed(framed)

    async def _pushed(self, framed: tuple[int, bytes]) -> bool:
        return bool(await self.send(*framed))

    # --- FrameConnection ------------------------------------------------------

    def on_proven(self) -> None:
        if not self.proven.done():
            self.proven.set_result(True)

    def on_frame(self, frame: Frame) -> None:
        flow = self._flows.get(frame.call_id)
        if flow is not None:
            if frame.kind is Kind.ITEM:
                if not flow.put(frame.payload):
                    self.close(f"the replica sent past a window of {flow.window.items} items")
            elif frame.kind is Kind.END:
                flow.finish(StopAsyncIteration())
            elif frame.kind is Kind.ERROR:
                flow.finish(HandlerError(str(frame.payload)))
            else:
                self.close(f"a {frame.kind.name} frame from the replica for a stream")
            return
        if frame.kind is Kind.BODY:
            self._take_piece(frame.call_id, frame.payload)
            return
        future = self._pending.pop(frame.call_id, None)
        if future is None or future.done():
            return  # a call cancelled meanwhile: its answer is not wanted
        if frame.call_id in self._answers:
            future.set_exception(ReplicaDiedError(f"replica {self.name} sent a {frame.kind.name} amid an answer's pieces"))
            self.close(f"a {frame.kind.name} frame amid an answer's pieces")
        elif frame.kind is Kind.RESULT or frame.kind is Kind.RESULTS:
            future.set_result(frame.payload)
        elif frame.kind is Kind.ANSWER and _answer_head(frame.payload, self.max_frame):
            status, headers, size = frame.payload
            self._answers[frame.call_id] = _Answer(status, headers, size)
            self._pending[frame.call_id] = future  # answered once its body's pieces are all here
        elif frame.kind is Kind.ERROR:
            future.set_exception(HandlerError(str(frame.payload)))
        else:
            future.set_exception(ReplicaDiedError(f"replica {self.name} answered with a {frame.kind.name} frame"))
            self.close(f"a {frame.kind.name} frame from the replica")

    def sink(self, call_id: int, size: int) -> memoryview | None:
        """An answer's next piece goes straight into its body, while its call still waits for it."""
        answer = self._answers.get(call_id)
        future = self._pending.get(call_id)
        if answer is None or future is None or future.done():
            return None
        return answer.body.room(size)

    def _take_piece(self, call_id: int, piece: bytes | int) -> None:
        """The next piece of an answer's body; with its last, the call is answered."""
        answer = self._answers.get(call_id)
        if answer is None:
            if call_id in self._pending:
                self.close("a BODY frame before its call's ANSWER")
            return  # a call cancelled meanwhile: the rest of its body is not wanted
        future = self._pending.get(call_id)
        if future is None or future.done():  # cancelled, and its task has not run yet to say so
            self._cancel(call_id)
            return
        if self.took_last_piece(call_id, answer.body, piece):
            del self._answers[call_id]
            del self._pending[call_id]
            future.set_result((answer.status, answer.headers, answer.body.body()))

    def close(self, reason: str) -> None:
        """End the connection; every pending call fails with ReplicaDiedError."""
        if self.lost is None:
            logger.warning("data connection to %s closed: %s", self.name, reason)
            self.lost = reason
        if self._transport is not None:
            self._transport.abort()
        self._fail_pending()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.lost is None:
            self.lost = f"the replica closed it ({exc!r})" if exc else "the replica closed it"
            if self._pending:
                logger.warning("data connection to %s lost with %d calls pending: %s", self.name, len(self._pending), self.lost)
        self._transport = None
        self._fail_pending()

    def _fail_pending(self) -> None:
        if not self.proven.done():
            self.proven.set_result(False)
        self.resume_writing()  # an upload waiting for room: its call fails below
        pending, self._pending = self._pending, {}
        self._answers.clear()
        for future in pending.values():
            if not future.done():
                future.set_exception(ReplicaDiedError(f"the data connection to {self.name} closed: {self.lost}"))
        for flow in self._flows.values():
            flow.finish(ReplicaDiedError(f"the data connection to {self.name} closed: {self.lost}"))


class _Answer:
    """A reply's head, while its body arrives in pieces."""

    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], size: int) -> None:
        self.status, self.headers, self.body = status, headers, Pieces(size)


def _answer_head(payload: Any, max_size: int) -> bool:
    """Whether an ANSWER's payload is (status, headers, size), its size one that comes in pieces."""
    match payload:
        case (int(), list(), int() as size) if PIECES_ABOVE < size <= max_size:
            return True
    return False


async def connect(path: str, name: str, max_frame: int = MAX_FRAME_BYTES, window: Window = Window()) -> ReplicaConnection:
    """A connection to the replica serving frames at `path`; raises OSError when
    it cannot be made or the peer is not our own OS user."""
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(_CONNECT_TIMEOUT_S):
        transport, connection = await loop.create_unix_connection(lambda: ReplicaConnection(name, max_frame, None, window), path)
    sock = transport.get_extra_info("socket")
    uid = peer_uid(sock)
    if not peer_allowed(uid, os.getuid()):
        transport.abort()
        raise OSError(f"the data socket {path} belongs to uid {uid}, not to us (uid {os.getuid()})")
    return connection


async def connect_tcp(
    host: str,
    port: int,
    secret: bytes,
    name: str,
    max_frame: int = MAX_FRAME_BYTES,
    timeout_s: float = _CONNECT_TIMEOUT_S,
    window: Window = Window(),
) -> ReplicaConnection:
    """A connection to the replica serving frames at TCP `(host, port)`, once
    both ends proved they know `secret` (`datalink.handshake`); raises
    OSError (ConnectionError when the handshake failed) or TimeoutError."""
    loop = asyncio.get_running_loop()
    handshake = Handshake(Role.PROXY, secret)
    connection: ReplicaConnection | None = None
    try:
        async with asyncio.timeout(timeout_s):
            _, connection = await loop.create_connection(
                lambda: ReplicaConnection(name, max_frame, handshake, window), host, port
            )
            if not await asyncio.shield(connection.proven):
                raise ConnectionError(f"no data connection to {name}: {connection.lost}")
    except BaseException:
        if connection is not None and connection.lost is None:
            connection.close("it did not complete the handshake in time")
        raise
    return connection


def _close_soon(loop: asyncio.AbstractEventLoop, connection: ReplicaConnection) -> None:
    """Close `connection` on its loop, from whichever thread dropped its replica's handle."""
    try:
        loop.call_soon_threadsafe(connection.close, "the replica left the table")
    except RuntimeError:
        pass  # the loop is closed, and its connections with it


class _Link:
    """One replica's data connection as it comes and goes: none until
    `connection` is open; after a lost one, none until `retry_at`, when the
    next look tries again."""

    __slots__ = ("connection", "asking", "failures", "retry_at", "connected_at", "closer")

    def __init__(self) -> None:
        self.connection: ReplicaConnection | None = None
        self.asking: asyncio.Task[None] | None = None
        self.failures = 0  # lost connections and failed attempts in a row
        self.retry_at: float | None = None  # None: no attempt is due (connected, asking, or Ray for good)
        self.connected_at = 0.0
        self.closer: weakref.finalize | None = None  # closes `connection` when the handle goes


class DataConnections:
    """One connection per replica with a way in for us (its Unix socket on
    this node, TCP elsewhere), made in the background as replicas are first
    seen; `connection(handle)` is the open one, or None: call it another way."""

    def __init__(
        self,
        local_node: Callable[[], str],
        ask_address: Callable[[Any], Awaitable[Address]],
        max_frame: int = MAX_FRAME_BYTES,
        window: Window = Window(),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`local_node()` names the proxy's node; `ask_address(handle)` the
        replica's `DataAddress` or None; `window` how far ahead of its client
        a stream's replica may push; `clock` times reconnection back-offs."""
        self._clock = clock
        self._window = window
        self._local_node = local_node
        self._ask_address = ask_address
        self._max_frame = max_frame
        # Forgotten with the handle: a replica that left leaves no entry behind.
        self._links: weakref.WeakKeyDictionary[Any, _Link] = weakref.WeakKeyDictionary()

    def via(self, handle: ReplicaHandle) -> str | None:
        """How `handle`'s replica is connected now: "unix", "tcp", or None (not at all)."""
        connection = self.connection(handle)
        return None if connection is None else connection.via

    def connection(self, handle: ReplicaHandle) -> ReplicaConnection | None:
        """The open connection to `handle`'s replica; None: there is none (yet, or for now)."""
        link = self._links.get(handle)
        if link is None:
            link = _Link()
            try:
                self._links[handle] = link
            except TypeError:
                return None  # not weakly referenceable: never framed
            link.asking = asyncio.ensure_future(self._discover(handle, link))
        connection = link.connection
        if connection is not None:
            if connection.open:
                return connection
            link.connection = None  # lost: over Ray until the back-off has passed
            if self._clock() - link.connected_at >= _BACKOFF_MAX_S:
                link.failures = 0  # it had lasted: start the back-off over
            self._back_off(link)
        if link.retry_at is not None and self._clock() >= link.retry_at:
            link.retry_at = None
            link.asking = asyncio.ensure_future(self._discover(handle, link))
        return None

    def _back_off(self, link: _Link) -> None:
        link.retry_at = self._clock() + min(_BACKOFF_FIRST_S * 2**link.failures, _BACKOFF_MAX_S)
        link.failures += 1

    async def _discover(self, handle: ReplicaHandle, link: _Link) -> None:
        """Ask where the replica serves frames and connect: to its Unix socket
        on our node, over TCP from another; a failed connection is tried again
        after a back-off, a replica without a way in stays on Ray."""
        name = repr(handle)
        try:
            try:
                async with asyncio.timeout(_ASK_TIMEOUT_S):
                    address = await self._ask_address(handle)
            except Exception as error:  # noqa: BLE001 — e.g. the actor died: Ray will say so on the next call
                logger.info("replica %s stays on Ray calls: no data address (%r)", name, error)
                return
            if not isinstance(address, DataAddress):
                return
            try:
                if address.node == self._local_node():
                    if not isinstance(address.path, str):
                        return
                    where = address.path
                    connection = await connect(address.path, name, self._max_frame, self._window)
                else:
                    if address.tcp is None or not address.secret:
                        return
                    host, port = address.tcp
                    where = f"{host}:{port}"
                    connection = await connect_tcp(
                        host, port, address.secret, name, self._max_frame, window=self._window
                    )
            except (OSError, TimeoutError) as error:
                # Once per run of failures (a firewalled port fails every attempt): the rest at debug.
                log = logger.warning if link.failures == 0 else logger.debug
                log("replica %s is called over Ray for now: its data socket %s: %s", name, where, error)
                self._back_off(link)
                return
            link.connection, link.connected_at = connection, self._clock()
            # A replica that leaves the table takes its connection along.
            if link.closer is not None:
                link.closer.detach()  # the lost connection's: one per handle, however often it reconnects
            link.closer = weakref.finalize(handle, _close_soon, asyncio.get_running_loop(), connection)
            link.closer.atexit = False
        finally:
            link.asking = None

    async def settled(self, handle: ReplicaHandle) -> bool:
        """Once it is known how `handle`'s replica is called: True for frames.
        (Calls never wait for this; tests and diagnostics do.)"""
        self.connection(handle)
        link = self._links.get(handle)
        if link is None:
            return False
        if link.asking is not None:
            await asyncio.shield(link.asking)
        return self.connection(handle) is not None

    def close(self) -> None:
        """Close every connection (tests; a proxy's end closes them with its process)."""
        for link in list(self._links.values()):
            if link.asking is not None:
                link.asking.cancel()
            if link.connection is not None:
                link.connection.close("the proxy closed it")
