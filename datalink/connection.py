"""One end of one data-path connection: the framing both ends share.

`FrameConnection` is the asyncio protocol under the proxy's connection to a
replica (`proxy.pool.socketcalls.ReplicaConnection`) and the replica's connection
from a proxy (`replica.data_socket`). It owns what both ends do alike: over
TCP, the handshake (`datalink.handshake`) runs first and no byte reaches the
`FrameDecoder` before the peer has proven itself; then every complete frame
goes to `on_frame`, in order; frames written within one loop iteration
leave in one write (joined when they are small; beside a body's pieces,
`writelines`: on uvloop, one vectored write of the buffers as they are),
and a body above `datalink.frames.PIECES_ABOVE` goes as BODY pieces
(`write_pieces`: each a head and a slice of the body, written once what
went before has drained, so the transport never holds the body twice).

Flow: once `FLUSH_ABOVE` bytes are queued within one iteration they go to
the transport at once, so its flow control sees them then, not at the end of
the iteration; `writable()` waits while the transport's buffer is above its
high-water mark. A producer that can wait (a stream's items, a body's
pieces) awaits it before it queues more, so what the peer has not read
waits with that producer, not in one buffer that every call on the
connection queues behind. Without it, a busy loop (an iteration of a second
and more) hands the socket only what its kernel buffer holds, ~200 KiB, per
iteration, and the rest of that iteration's writes queue in user space, in
front of whatever is written next: with 5,000 open SSE streams through one
replica (`python -m bench.streams`), its streams produced ~100k events/s,
~5k/s reached the proxy (idle meanwhile), and each event's delay grew by a
second every second, to 30 s at the streams' end (issue 48).

It is a `BufferedProtocol`: the transport reads into the decoder's buffers,
and a large BODY piece straight into its body, where the subclass's `sink`
says (the call's `datalink.frames.Pieces`); `took_last_piece` then only
asks whether the body is complete. A frame completed by a read in place is
handed on once that read has let go of the buffer (the next loop
iteration, with any frame read after it, in order): only then can the body
become bytes without a copy. A malformed frame or a failed handshake
closes the connection (`close`, with the reason). What the frames mean —
calls and their replies on the proxy's side, one task per call on the
replica's — is the subclasses'.

The I/O shell of the data path: asyncio's transport, no Ray.
"""

from __future__ import annotations

import asyncio

from typing import Callable

from datalink.frames import (
    BODY_PIECE_BYTES,
    MAX_FRAME_BYTES,
    Frame,
    FrameDecoder,
    FrameError,
    Pieces,
    piece_head,
)
from datalink.handshake import Handshake, HandshakeError
from datalink.peers import set_nodelay

__all__ = ["FrameConnection"]


# What the handshake's messages are read into (each is far smaller).
_HANDSHAKE_READ_BYTES = 4096
# Queued within one loop iteration beyond this, frames go to the transport at
# once: its buffer's high-water mark (asyncio's and uvloop's default).
FLUSH_ABOVE = 64 * 1024


class FrameConnection(asyncio.BufferedProtocol):
    """Frames in (after the handshake, over TCP), frames out in one write per loop iteration."""

    def __init__(self, max_frame: int = MAX_FRAME_BYTES, handshake: Handshake | None = None) -> None:
        """Made on the loop it serves (asked once, not per frame); with a
        `handshake` (TCP), nothing is decoded until the peer has proven itself."""
        self._loop = asyncio.get_running_loop()
        self._handshake = handshake
        self._decoder = FrameDecoder(self.on_frame, max_frame, self.sink)
        self._proving: bytearray | None = None if handshake is None else bytearray(_HANDSHAKE_READ_BYTES)
        # Frames completed by a read in place, until that read has let go of its buffer (then None).
        self._held: list[Frame] | None = None
        self._transport: asyncio.Transport | None = None
        self._out: list[bytes | memoryview] = []
        self._queued = 0  # bytes in `_out`
        self._vectored = False  # a body's piece is among `_out`
        self._writable: asyncio.Future[None] | None = None  # while the transport's buffer is full

    # --- what a subclass says -------------------------------------------------

    def on_frame(self, frame: Frame) -> None:
        """One frame from the proven peer, in arrival order."""
        raise NotImplementedError

    def sink(self, call_id: int, size: int) -> memoryview | None:
        """Where the next BODY piece of call `call_id` (`size` bytes) goes: `room(size)` of the
        body that call is receiving, or None when it receives none (the piece then comes as bytes)."""
        return None

    def on_proven(self) -> None:
        """The TCP peer has proven it knows the secret: frames flow from now on."""

    def close(self, reason: str) -> None:
        """End the connection because of `reason` (a malformed frame, a failed handshake, ...)."""
        raise NotImplementedError

    # --- shared ---------------------------------------------------------------

    @property
    def proving(self) -> bool:
        """Whether the handshake still runs (no frame may be sent or decoded yet)."""
        return self._handshake is not None

    def write(self, frame: bytes | memoryview) -> None:
        """Queue one encoded frame (or a part of one): what is queued within one loop
        iteration leaves in one write, or in one per `FLUSH_ABOVE` bytes."""
        if not self._out:
            self._loop.call_soon(self._flush)
        self._out.append(frame)
        self._queued += len(frame)
        if self._queued > FLUSH_ABOVE:
            self._flush()

    def _flush(self) -> None:
        out, self._out = self._out, []
        self._queued = 0
        vectored, self._vectored = self._vectored, False
        transport = self._transport
        if transport is not None and out and not transport.is_closing():
            if len(out) == 1:
                transport.write(out[0])
            elif vectored:
                transport.writelines(out)  # a body's pieces among them: not copied into one buffer
            else:
                transport.write(b"".join(out))  # small frames: one buffer, as they always went

    async def write_pieces(self, call_id: int, body: bytes, stop: Callable[[], bool]) -> bool:
        """`body` as BODY frames of at most `BODY_PIECE_BYTES`: each a head and a
        slice of `body` (never copied here), queued once what went before has
        drained. False when `stop()` said, before a piece, that nobody wants the rest."""
        view = memoryview(body)
        for start in range(0, len(view), BODY_PIECE_BYTES):
            await self.drained()
            if stop():
                return False
            piece = view[start : start + BODY_PIECE_BYTES]
            self.write(piece_head(call_id, len(piece)))
            self._vectored = True  # before the piece: a write past FLUSH_ABOVE flushes at once
            self.write(piece)
        return True

    def took_last_piece(self, call_id: int, body: Pieces, piece: bytes | int) -> bool:
        """Add the next BODY `piece` of call `call_id` to `body` (an int: its size, already
        written into it by `sink`); True once it is complete. Pieces past the announced size
        close the connection (and say False)."""
        if isinstance(piece, int):
            return body.placed(piece)
        try:
            return body.add(piece)
        except FrameError as error:
            self.close(f"call {call_id}: {error}")
            return False

    async def drained(self) -> None:
        """Once what was written has gone to the transport and its buffer is below its high-water mark."""
        self._flush()
        await self.writable()

    async def writable(self) -> None:
        """Once the transport's buffer is below its high-water mark (at once, mostly): what
        a producer that can wait awaits before it queues more. Waiters go on in the order they came."""
        while self._writable is not None:
            await asyncio.shield(self._writable)

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = self._loop.create_future()

    def resume_writing(self) -> None:
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport subclass
        if self._handshake is not None:
            set_nodelay(transport.get_extra_info("socket"))
            transport.write(self._handshake.greeting())  # type: ignore[attr-defined]  # a stream transport

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._proving is not None:
            return memoryview(self._proving)
        return self._decoder.buffer()

    def buffer_updated(self, nbytes: int) -> None:
        if self._proving is not None:
            self._proved(nbytes)
            return
        # A read in place still holds its buffer (a body's) while we are called: what it completes waits.
        hold = self._held is None and self._decoder.in_place
        if hold:
            self._held = []
            self._decoder.on_frame = self._held.append
        try:
            self._decoder.filled(nbytes)
        except FrameError as error:
            self.close(f"malformed frame: {error}")
        if hold:
            if self._held:
                self._loop.call_soon(self._hand_on_held)
            else:
                self._held = None
                self._decoder.on_frame = self.on_frame

    def _proved(self, nbytes: int) -> None:
        """The handshake's next bytes; once it is proven, what came after them is the first of the frames."""
        assert self._proving is not None
        rest = self._prove(bytes(self._proving[:nbytes]))
        if not rest:
            return
        try:
            self._decoder.feed(rest)
        except FrameError as error:
            self.close(f"malformed frame: {error}")

    def _hand_on_held(self) -> None:
        """The frames completed since a read in place, in order (and whatever came after them)."""
        held, self._held = self._held or [], None
        self._decoder.on_frame = self.on_frame
        if self._transport is None or self._transport.is_closing():
            return  # closed meanwhile: nobody is there to answer
        for frame in held:
            self.on_frame(frame)

    def _prove(self, data: bytes) -> bytes | None:
        """The handshake's next step; what came after the peer's proof once it is proven."""
        assert self._handshake is not None
        if self._transport is None:
            return None
        try:
            out, rest = self._handshake.feed(data)
        except HandshakeError as error:
            self.close(f"the handshake failed: {error}")
            return None
        if out:
            self._transport.write(out)
        if rest is None:
            return None
        self._handshake = None
        self._proving = None
        self.on_proven()
        return rest
