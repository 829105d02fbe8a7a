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
  REQUEST   a `WireRequest`                -> RESULT (a `Reply`) or ERROR
  UPLOAD    a `WireRequest` whose body is its size (int), then BODY frames -> RESULT or ERROR
  BODY      raw bytes, not pickled: the next piece of an UPLOAD's body (at most `BODY_PIECE_BYTES`)
  BATCH     a list of `TimedRequest` (one call of a batched handler) -> RESULTS
  CANCEL    no payload: stop that call's handler (or stream, or WebSocket); nothing is answered
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

A request body above `BODY_PIECE_BYTES` goes as an UPLOAD: the proxy writes its
pieces as the connection drains, so neither end holds it twice (the proxy its
body and at most a piece or two in flight; the replica its body as it grows).

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
    "HEADER_BYTES",
    "BODY_PIECE_BYTES",
    "MAX_FRAME_BYTES",
]

# Ten times the proxy's default body limit (10 MiB): a request that would not
# fit goes over Ray instead (`proxy.socketcalls`), and a larger reply is held
# by the replica and streamed (`replica.data_socket`).
MAX_FRAME_BYTES = 100 * 1024 * 1024
# A request body larger than this crosses as an UPLOAD, in BODY frames of this size.
BODY_PIECE_BYTES = 1024 * 1024

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


def encode_piece(call_id: int, piece: bytes | memoryview) -> bytes:
    """One BODY frame: `piece` as it is, not pickled."""
    if not 0 <= call_id <= _MAX_CALL_ID:
        raise ValueError(f"call id {call_id} does not fit in 8 bytes")
    return _HEAD.pack(HEADER_BYTES + len(piece), Kind.BODY, call_id) + piece


class FrameDecoder:
    """Frames out of a byte stream, however it was split into reads."""

    def __init__(self, max_frame: int = MAX_FRAME_BYTES) -> None:
        self._max_frame = max_frame
        self._buffer = bytearray()
        self._broken: FrameError | None = None

    def feed(self, data: bytes) -> list[Frame]:
        """Every frame complete after `data`; the rest waits for the next read.

        Raises `FrameError` on the first malformed frame, and again on every
        later feed: after one, the stream has no frame boundaries left.
        """
        if self._broken is not None:
            raise self._broken
        buffer = self._buffer
        buffer += data
        frames: list[Frame] = []
        offset = 0
        try:
            while len(buffer) - offset >= _LENGTH.size:
                (length,) = _LENGTH.unpack_from(buffer, offset)
                if length < HEADER_BYTES or length > self._max_frame:
                    raise FrameError(f"a frame of {length} bytes (allowed {HEADER_BYTES} to {self._max_frame})")
                end = offset + _LENGTH.size + length
                if len(buffer) < end:
                    break
                _, kind_byte, call_id = _HEAD.unpack_from(buffer, offset)
                kind = _KINDS.get(kind_byte)
                if kind is None:
                    raise FrameError(f"a frame of unknown kind {kind_byte}")
                with memoryview(buffer) as view:
                    body = view[offset + _HEAD.size : end]
                    try:
                        payload = bytes(body) if kind is Kind.BODY else pickle.loads(body)
                    except Exception as error:  # noqa: BLE001 — any undecodable payload is malformed
                        raise FrameError(f"a {kind.name} frame with an undecodable payload: {error!r}") from None
                    finally:
                        body.release()
                frames.append(Frame(kind, call_id, payload))
                offset = end
        except FrameError as error:
            self._broken = error
            self._buffer = bytearray()
            raise
        del buffer[:offset]
        return frames

    def __len__(self) -> int:
        """Bytes held back, waiting for the rest of a frame."""
        return len(self._buffer)
