"""The frames a proxy and a replica exchange over one persistent connection.

Ray stays the control plane and the fallback; the proxy sends a replica's
requests over one persistent connection (`proxy.socketcalls`, served by
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
            decoded as bytes, or as the list of its parts as they were read (`Parts`) when it came in several
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
in flight; the receiver one buffer of the announced size, filled as the
pieces come, which becomes the body uncopied; a body in one piece is that
piece: `Pieces`). The decoder reads frames out of a read where it is (only
an incomplete tail is kept), and gathers a frame larger than
`_GATHER_ABOVE` from its reads rather than copying it into its buffer and
out of it again: a BODY's parts are handed on as they are (`Parts`, which
`Pieces` copies once, into the body), any other payload joined once.

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
from typing import Any

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
    "Parts",
    "HEADER_BYTES",
    "BODY_PIECE_BYTES",
    "PIECES_ABOVE",
    "MAX_FRAME_BYTES",
]

# Ten times the proxy's default body limit (10 MiB): a request that would not
# fit goes over Ray instead (`proxy.socketcalls`), and a larger reply is held
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
# A frame longer than this, not yet complete, is gathered from its reads
# instead of being copied into the decoder's buffer and out again.
_GATHER_ABOVE = 64 * 1024

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


# A BODY frame that came in several reads, as its parts: its receiver copies them once, into its body.
Parts = list[bytes | memoryview]


class Pieces:
    """A body arriving as BODY pieces up to its announced size, held once:
    written into one buffer of that size as they come (a piece's `Parts`
    each straight into it), which then becomes the body without a copy; a
    body that came in one piece is that piece."""

    __slots__ = ("size", "taken", "_whole", "_buffer")

    def __init__(self, size: int) -> None:
        self.size = size
        self.taken = 0
        self._whole: bytes | None = None
        self._buffer: io.BytesIO | None = None

    def add(self, piece: bytes | Parts) -> bool:
        """Take the next piece; True once the body is complete. Raises
        `FrameError` when the pieces go past the announced size."""
        size = len(piece) if isinstance(piece, bytes) else sum(len(part) for part in piece)
        self.taken += size
        if self.taken > self.size:
            raise FrameError(f"{self.taken} bytes of pieces for a body of {self.size}")
        if self.taken == size == self.size:
            self._whole = piece if isinstance(piece, bytes) else b"".join(piece)
            return True
        if self._buffer is None:
            # Its own bytes, shared with nobody, so CPython's BytesIO writes into them in
            # place (no growing, no copy) and getvalue() hands them over as they are.
            self._buffer = io.BytesIO(bytes(self.size))
        if isinstance(piece, bytes):
            self._buffer.write(piece)
        else:
            self._buffer.writelines(piece)
        return self.taken == self.size

    def body(self) -> bytes:
        """The whole body (once `add` said it is complete)."""
        if self._whole is not None:
            return self._whole
        return b"" if self._buffer is None else self._buffer.getvalue()


class FrameDecoder:
    """Frames out of a byte stream, however it was split into reads."""

    def __init__(self, max_frame: int = MAX_FRAME_BYTES) -> None:
        self._max_frame = max_frame
        self._buffer = bytearray()
        self._broken: FrameError | None = None
        self._gathering: _Gathering | None = None  # a large frame, arriving

    def feed(self, data: bytes | memoryview) -> list[Frame]:
        """Every frame complete after `data`; the rest waits for the next read.

        Raises `FrameError` on the first malformed frame, and again on every
        later feed: after one, the stream has no frame boundaries left.
        """
        if self._broken is not None:
            raise self._broken
        frames: list[Frame] = []
        try:
            gathering = self._gathering
            if gathering is not None:
                rest = gathering.take(data)
                if rest is None:
                    return frames
                self._gathering = None
                frames.append(gathering.frame())
                data = rest
            buffer = self._buffer
            if buffer:
                buffer += data
                del buffer[: self._parse(buffer, frames, False)]
            else:
                # Nothing held back: frames are read where they are, and only a part of one is kept.
                offset = self._parse(data, frames, isinstance(data, bytes) or data.readonly)
                if offset < len(data):
                    buffer += data[offset:]
        except FrameError as error:
            self._broken = error
            self._buffer = bytearray()
            self._gathering = None
            raise
        return frames

    def _parse(self, source: bytes | bytearray | memoryview, frames: list[Frame], immutable: bool) -> int:
        """Append the frames complete in `source` to `frames`; how many of its bytes they took.
        A large frame's start becomes `_gathering` (kept as a view of `source` when it is `immutable`)."""
        offset = 0
        size = len(source)
        with memoryview(source) as view:
            while size - offset >= _LENGTH.size:
                (length,) = _LENGTH.unpack_from(source, offset)
                if length < HEADER_BYTES or length > self._max_frame:
                    raise FrameError(f"a frame of {length} bytes (allowed {HEADER_BYTES} to {self._max_frame})")
                end = offset + _LENGTH.size + length
                if size < end and (length <= _GATHER_ABOVE or size - offset < _HEAD.size):
                    break
                _, kind_byte, call_id = _HEAD.unpack_from(source, offset)
                kind = _KINDS.get(kind_byte)
                if kind is None:
                    raise FrameError(f"a frame of unknown kind {kind_byte}")
                if size < end:  # a large frame's start: the rest is gathered as it comes
                    start = view[offset + _HEAD.size :]
                    self._gathering = _Gathering(kind, call_id, start if immutable else bytes(start), end - size)
                    return size
                body = view[offset + _HEAD.size : end]
                try:
                    payload = bytes(body) if kind is Kind.BODY else _unpickled(kind, body)
                finally:
                    body.release()
                frames.append(Frame(kind, call_id, payload))
                offset = end
        return offset

    def __len__(self) -> int:
        """Bytes held back, waiting for the rest of a frame."""
        gathered = 0 if self._gathering is None else self._gathering.held
        return len(self._buffer) + gathered


class _Gathering:
    """A large frame's payload as its reads come."""

    __slots__ = ("kind", "call_id", "parts", "held", "missing")

    def __init__(self, kind: Kind, call_id: int, first: bytes | memoryview, missing: int) -> None:
        self.kind, self.call_id = kind, call_id
        self.parts: list[bytes | memoryview] = [first]
        self.held = len(first)
        self.missing = missing

    def take(self, data: bytes | memoryview) -> bytes | memoryview | None:
        """Keep what of `data` belongs to the frame (a copy of it when `data` is
        a writable view, which its reader may reuse); what comes after it once
        the frame is complete, else None."""
        if len(data) < self.missing:
            self.parts.append(data if isinstance(data, bytes) or data.readonly else bytes(data))
            self.held += len(data)
            self.missing -= len(data)
            return None
        view = memoryview(data)
        self.parts.append(view[: self.missing] if view.readonly else bytes(view[: self.missing]))
        rest = view[self.missing :]
        self.held += self.missing
        self.missing = 0
        return rest

    def frame(self) -> Frame:
        """The frame, complete: a BODY's parts as they are, any other payload joined and unpickled."""
        if self.kind is Kind.BODY:
            return Frame(self.kind, self.call_id, self.parts)
        return Frame(self.kind, self.call_id, _unpickled(self.kind, b"".join(self.parts)))


def _unpickled(kind: Kind, payload: bytes | memoryview) -> Any:
    try:
        return pickle.loads(payload)
    except Exception as error:  # noqa: BLE001 — any undecodable payload is malformed
        raise FrameError(f"a {kind.name} frame with an undecodable payload: {error!r}") from None
