"""The frames a proxy and a replica exchange over one persistent connection.

Ray stays the control plane and the fallback; the proxy sends a replica's
requests over one persistent connection (`proxy.pool.socketcalls`, served by
`replica.data_socket`) — a Unix socket on the same node, TCP across nodes —
many calls multiplexed on it by call id.

A frame is a 4-byte big-endian length, then that many bytes: a one-byte
`Kind`, an 8-byte big-endian call id, and the payload. The length is at
least `HEADER_BYTES` and at most the decoder's `max_frame` (`MAX_FRAME_BYTES`
unless told): a frame outside that, an unknown kind or an undecodable payload
is a `FrameError`, and whoever reads it closes the connection with the reason
in its log. Many frames may go out in one write and come in with one read:
`FrameDecoder.feed` answers every complete frame in what it has so far.

Calls (proxy to replica) and their replies (replica to proxy), by call id:
  REQUEST   a `WireRequest`                -> RESULT (a `Reply`), ANSWER, or ERROR
  UPLOAD    a `WireRequest` whose body is its size (int), then BODY frames -> RESULT, ANSWER or ERROR
  BODY      raw bytes, not pickled: the next piece of an UPLOAD's or an ANSWER's body (at most `BODY_PIECE_BYTES`);
            decoded as its size (int) when it was written into its body (`Sink`), else as bytes
  BATCH     a list of `TimedRequest` (one call of a batched handler) -> RESULTS
  CANCEL    no payload: stop that call's handler (or stream, or WebSocket); nothing is answered
  ANSWER    a `WireResponse` whose body is its size (int), then BODY frames: a REQUEST's or UPLOAD's reply
  ERROR     the handler's traceback text (str)

Streams and WebSockets, by call id (the replica pushes ITEMs as they come):
  STREAM    an `Opening` of (stream id, window)       -> ITEM (bytes)... then END or ERROR
  WEBSOCKET an `Opening` of ((websocket id, request), window) -> ITEM (an ASGI message)... then END or ERROR
  CREDIT    (items, bytes) the proxy has passed on: that much more may come; nothing is answered
  DISCARD   a stream id to let go unread; nothing is answered
  PUSH      (websocket id, a client's ASGI message)   -> RESULT (False: no such WebSocket any more)

Flow control: a STREAM or WEBSOCKET call's `Window` bounds what the replica may
have sent ahead of the proxy's CREDITs — it sends while fewer than `items`
ITEMs and `bytes` bytes (`item_bytes`) are unacknowledged (always at least
one), so a slow client holds the replica's producer instead of its memory.

A body above `PIECES_ABOVE` crosses in BODY pieces, either way: a request's
as an UPLOAD, a plain reply's as an ANSWER. Its sender writes the pieces as
the connection drains — each a BODY head and a slice of the body, handed to
the transport as they are (`piece_head`), never copied into one frame — so
neither end holds it twice (the sender its body and at most a piece or two
in flight; the receiver one buffer of the announced size, `Pieces`, which
becomes the body uncopied; a body in one piece is that piece).

Reading: the decoder owns the buffers reads go into (`FrameDecoder.buffer`
and `filled`, for an `asyncio.BufferedProtocol`). Small frames are decoded
where they were read. A large frame's payload is read in place once its head
is in: a BODY piece straight into its body (`Pieces.room`, found through the
receiver's `Sink`), so the kernel's copy into the body is the only one but
for the bytes that came in the same read as the piece's head; any other
payload into a buffer of its size, then unpickled.

Payloads are pickled (protocol 5), but a BODY's, and unpickling runs whatever the bytes
say. That is acceptable ONLY because of each connection's access control. The
Unix socket lives in a directory only this OS user can enter (mode 0700), it
is mode 0600 itself, and both ends refuse a peer whose SO_PEERCRED uid is not
their own (`datalink.peers`), so nothing another OS user can write is ever
unpickled. On TCP, both ends first prove they know the replica's secret
(`datalink.handshake`), and no byte is given to a `FrameDecoder` before
that. Never carry these frames over anything weaker (a shared directory, TCP
without the handshake). The handshake authenticates, it does not encrypt:
TCP frames cross the cluster's network in the clear, as Ray's own traffic
does without TLS.

Pure: bytes in, frames out; no sockets here.
"""

from __future__ import annotations

import enum
import io
import pickle
import struct
from dataclasses import dataclass
from typing import Any, Callable

__all__ = [
    "Kind",
    "Window",
    "Opening",
    "item_bytes",
    "Frame",
    "FrameError",
    "FrameDecoder",
    "encode",
    "encode_piece",
    "piece_head",
    "Pieces",
    "Sink",
    "HEADER_BYTES",
    "BODY_PIECE_BYTES",
    "PIECES_ABOVE",
    "MAX_FRAME_BYTES",
]

# Ten times the proxy's default body limit (10 MiB): a request that would not
# fit goes over Ray instead (`proxy.pool.socketcalls`), and a larger reply is held
# by the replica and streamed (`replica.data_socket`).
MAX_FRAME_BYTES = 100 * 1024 * 1024
# A body larger than `PIECES_ABOVE` crosses in BODY frames of at most this size
# (a request's as an UPLOAD, a reply's as an ANSWER); a smaller one is pickled
# with its request or reply, in one frame. Echoed over a Unix socket (proxy and
# replica in one process, uvloop), one frame and pieces cost the same CPU at
# 96-128 KiB; at 64 KiB one frame took 0.07 ms against 0.10, at 160 KiB 0.36 ms
# against 0.14.
BODY_PIECE_BYTES = 1024 * 1024
PIECES_ABOVE = 128 * 1024
# Each connection reads into one buffer of this size, its own for its whole life (so
# kept small: a proxy holds one per replica); a frame whose payload is larger than
# `_IN_PLACE_ABOVE` and not complete in a read is read in place instead: its payload
# straight into where it ends up, in reads as large as what is missing of it.
_READ_BYTES = 64 * 1024
_IN_PLACE_ABOVE = 32 * 1024

_LENGTH = struct.Struct(">I")
_HEAD = struct.Struct(">IBQ")  # length, kind, call id
HEADER_BYTES = _HEAD.size - _LENGTH.size  # what the length counts besides the payload
_MAX_CALL_ID = 2**64 - 1


class Kind(enum.IntEnum):
    REQUEST = 1
    # 2 was a coalesced list of requests: only Ray calls are coalesced now.
    BATCH = 3
    CANCEL = 4
    RESULT = 5
    RESULTS = 6
    ERROR = 7
    STREAM = 8
    WEBSOCKET = 9
    ITEM = 10
    END = 11
    CREDIT = 12
    DISCARD = 13
    PUSH = 14
    UPLOAD = 15
    BODY = 16
    ANSWER = 17


_KINDS = {int(kind): kind for kind in Kind}


class FrameError(Exception):
    """The peer sent something that is not a frame: close the connection."""


@dataclass(frozen=True, slots=True)
class Frame:
    kind: Kind
    call_id: int
    payload: Any


@dataclass(frozen=True, slots=True)
class Window:
    """How far ahead of the proxy's credit a replica may push a stream's items."""

    items: int = 32
    bytes: int = 2 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.items < 1 or self.bytes < 1:
            raise ValueError(f"a window must allow at least one item and one byte, not {self}")


@dataclass(frozen=True, slots=True)
class Opening:
    """A STREAM's stream id, or a WEBSOCKET's (websocket id, request); and the window."""

    target: Any
    window: Window


def item_bytes(item: Any) -> int:
    """What one ITEM counts against a window's bytes: a chunk's length, or a
    WebSocket message's body (its bytes, or its text's characters); other
    messages count 0."""
    if isinstance(item, (bytes, bytearray, memoryview)):
        return len(item)
    if isinstance(item, dict):
        body = item.get("bytes") or item.get("text") or b""
        return len(body) if isinstance(body, (bytes, bytearray, str)) else 0
    return 0


def encode(kind: Kind, call_id: int, payload: Any = None) -> bytes:
    """One frame, ready to write; callers check `len()` against their peer's bound."""
    if not 0 <= call_id <= _MAX_CALL_ID:
        raise ValueError(f"call id {call_id} does not fit in 8 bytes")
    body = pickle.dumps(payload, protocol=5)
    length = HEADER_BYTES + len(body)
    if length > 0xFFFFFFFF:
        raise ValueError(f"a frame of {length} bytes does not fit a 4-byte length")
    return _HEAD.pack(length, kind, call_id) + body


def piece_head(call_id: int, size: int) -> bytes:
    """The head of one BODY frame whose piece (`size` bytes, not pickled) is written right after it."""
    if not 0 <= call_id <= _MAX_CALL_ID:
        raise ValueError(f"call id {call_id} does not fit in 8 bytes")
    return _HEAD.pack(HEADER_BYTES + size, Kind.BODY, call_id)


def encode_piece(call_id: int, piece: bytes | memoryview) -> bytes:
    """One BODY frame as one bytes object (tests; writers write `piece_head` and the piece apart)."""
    return piece_head(call_id, len(piece)) + piece


# Where a BODY piece's payload goes, asked when its head is read: (call id, the piece's size) ->
# a writable view of exactly that size (`Pieces.room` of the call's body), or None for a call
# whose body nobody holds (the piece then comes out as bytes).
Sink = Callable[[int, int], "memoryview | None"]


class Pieces:
    """A body arriving as BODY pieces up to its announced size, held once:
    one buffer of that size, each piece written straight into it (`room`,
    then `placed` once written: by a socket read, or by `add` from bytes),
    which then becomes the body without a copy; a body that came in one
    piece, as bytes, is that piece."""

    __slots__ = ("size", "taken", "written", "_whole", "_buffer", "_view")

    def __init__(self, size: int) -> None:
        self.size = size
        self.taken = 0  # bytes given a room so far
        self.written = 0  # bytes of those written
        self._whole: bytes | None = None
        self._buffer: io.BytesIO | None = None
        self._view: memoryview | None = None

    @property
    def complete(self) -> bool:
        return self.written == self.size

    def room(self, size: int) -> memoryview:
        """Where the next piece of `size` bytes goes: the slice of the body it
        fills, to be written in place (then `placed`). Raises `FrameError`
        when the pieces go past the announced size."""
        if self.taken + size > self.size:
            raise FrameError(f"{self.taken + size} bytes of pieces for a body of {self.size}")
        if self._view is None:
            # Its own bytes, shared with nobody, so CPython's BytesIO exports them as they are
            # (getbuffer) and, once no view of them is left, getvalue() hands them over uncopied.
            self._buffer = io.BytesIO(bytes(self.size))
            self._view = self._buffer.getbuffer()
        start = self.taken
        self.taken += size
        return self._view[start : self.taken]

    def placed(self, size: int) -> bool:
        """A piece of `size` bytes is written into the room it was given; True once the body is complete."""
        self.written += size
        return self.complete

    def add(self, piece: bytes) -> bool:
        """Take the next piece, as bytes; True once the body is complete.
        Raises `FrameError` when the pieces go past the announced size."""
        if self.taken == 0 and len(piece) == self.size:
            self.taken = self.written = self.size
            self._whole = piece
            return True
        with self.room(len(piece)) as room:
            room[:] = piece
        return self.placed(len(piece))

    def body(self) -> bytes:
        """The whole body (once complete). Uncopied when no view of it is left:
        whoever read into a `room` has let it go."""
        if self._whole is not None:
            return self._whole
        if self._view is not None:
            self._view.release()
            self._view = None
        return b"" if self._buffer is None else self._buffer.getvalue()


class FrameDecoder:
    """Frames out of a byte stream, however it was split into reads, each
    handed to `on_frame` as soon as it is complete (so a frame may change
    where the next one's piece goes).

    The stream is read into the decoder's own buffers: `buffer` says where
    the next read goes and `filled` how much it brought. Small frames are
    read into one read buffer and decoded where they are; the payload of a
    frame larger than `_IN_PLACE_ABOVE` that a read did not complete is read
    straight into where it ends up (what came with its head is copied
    there): a BODY piece into its body (`sink`), any other payload into a
    buffer of its size that is then unpickled. `feed` copies bytes in
    (tests, and what came in with the handshake).
    """

    def __init__(
        self, on_frame: Callable[[Frame], None], max_frame: int = MAX_FRAME_BYTES, sink: Sink | None = None
    ) -> None:
        self.on_frame = on_frame  # who the frames go to (its owner may switch it between reads)
        self._max_frame = max_frame
        self._sink = sink
        self._read = memoryview(bytearray(_READ_BYTES))
        self._start = 0  # the bytes read and not yet decoded are _read[_start:_end]
        self._end = 0
        self._broken: FrameError | None = None
        # A large frame whose payload is being read in place: where, how much of it is in, and its head.
        self._target: memoryview | None = None
        self._filled = 0
        self._kind = Kind.BODY
        self._call_id = 0
        self._placed = False  # a BODY piece read into its body (else: a payload to decode)

    @property
    def in_place(self) -> bool:
        """Whether the next read goes straight into a large frame's payload."""
        return self._target is not None

    def buffer(self) -> memoryview:
        """Where the next read goes: as much of it as the read brings (never more than its length)."""
        if self._broken is not None:
            raise self._broken
        if self._target is not None:
            return self._target[self._filled :]
        if self._end == len(self._read):  # full: the start of a frame it ends with moves to the front
            kept = bytes(self._read[self._start : self._end])  # at most a small frame (no overlapping copy)
            self._read[: len(kept)] = kept
            self._start, self._end = 0, len(kept)
        return self._read[self._end :]

    def filled(self, size: int) -> None:
        """A read put `size` bytes into `buffer()`: every frame they complete goes to `on_frame`.

        Raises `FrameError` on the first malformed frame, and again on every
        later read: after one, the stream has no frame boundaries left.
        """
        if self._broken is not None:
            raise self._broken
        try:
            if self._target is None:
                self._end += size
                self._decode()
                return
            self._filled += size
            if self._filled == len(self._target):
                self.on_frame(self._finished())
        except FrameError as error:
            self._broken = error
            self._start = self._end = 0
            self._target = None
            raise

    def feed(self, data: bytes | memoryview) -> None:
        """`data` as if read: copied into `buffer()` as far as it goes, then `filled`, until all is in."""
        with memoryview(data) as view:
            taken = 0
            while taken < len(view):
                with self.buffer() as room:
                    size = min(len(room), len(view) - taken)
                    room[:size] = view[taken : taken + size]
                taken += size
                self.filled(size)

    def _decode(self) -> None:
        """Hand on every frame complete in the read buffer; a large frame's start
        begins its in-place read; the start of a small one waits for the next read.
        (Each frame is taken off before it is handed on: a handler that raises loses no other.)"""
        read, end = self._read, self._end
        while end - self._start >= _LENGTH.size:
            start = self._start
            (length,) = _LENGTH.unpack_from(read, start)
            if length < HEADER_BYTES or length > self._max_frame:
                raise FrameError(f"a frame of {length} bytes (allowed {HEADER_BYTES} to {self._max_frame})")
            if end - start < _HEAD.size:
                break
            _, kind_byte, call_id = _HEAD.unpack_from(read, start)
            kind = _KINDS.get(kind_byte)
            if kind is None:
                raise FrameError(f"a frame of unknown kind {kind_byte}")
            frame_end = start + _LENGTH.size + length
            if frame_end <= end:
                self._start = frame_end
                self.on_frame(self._decoded(kind, call_id, read[start + _HEAD.size : frame_end]))
            elif length - HEADER_BYTES > _IN_PLACE_ABOVE:
                self._start = end
                self._begin(kind, call_id, length - HEADER_BYTES, read[start + _HEAD.size : end])
            else:
                break  # a small frame's start: its rest comes with the next read
        if self._start == end:
            self._start = self._end = 0

    def _decoded(self, kind: Kind, call_id: int, payload: memoryview) -> Frame:
        """A frame complete in the read buffer (read there, so nothing may keep a view of it)."""
        with payload:
            if kind is not Kind.BODY:
                return Frame(kind, call_id, _unpickled(kind, payload))
            room = None if self._sink is None else self._sink(call_id, len(payload))
            if room is None:
                return Frame(kind, call_id, bytes(payload))
            with room:
                room[:] = payload
            return Frame(kind, call_id, len(payload))

    def _begin(self, kind: Kind, call_id: int, size: int, first: memoryview) -> None:
        """A large frame's head and the start of its payload: the rest is read in place."""
        with first:
            room = None if kind is not Kind.BODY or self._sink is None else self._sink(call_id, size)
            self._placed = room is not None
            target = room if room is not None else memoryview(bytearray(size))
            target[: len(first)] = first
            self._filled = len(first)
        self._target, self._kind, self._call_id = target, kind, call_id

    def _finished(self) -> Frame:
        """The frame read in place, now complete."""
        target, self._target = self._target, None
        assert target is not None
        with target:
            if self._placed:
                return Frame(self._kind, self._call_id, len(target))
            if self._kind is Kind.BODY:
                return Frame(self._kind, self._call_id, bytes(target))  # a piece nobody holds a body for
            return Frame(self._kind, self._call_id, _unpickled(self._kind, target))

    def __len__(self) -> int:
        """Bytes read and not yet handed on: the start of a frame, or a large frame's payload so far."""
        return self._end - self._start + (0 if self._target is None else self._filled)
def _unpickled(kind: Kind, payload: bytes | memoryview) -> Any:
    try:
        return pickle.loads(payload)
    except Exception as error:  # noqa: BLE001 — any undecodable payload is malformed
        raise FrameError(f"a {kind.name} frame with an undecodable payload: {error!r}") from None
