"""A hostile HTTP/2 client for gRPC ports: frames written by hand (hyperframe, hpack), so it can do
what a well-behaved client never does — open more streams than the server's SETTINGS allow, all
on one connection, as fast as the socket and the connection's flow-control window take them.

grpcio's own client would not serve here: it honours SETTINGS_MAX_CONCURRENT_STREAMS and queues
the excess calls on the client side, so the server would never see them. This one keeps no
stream state and ignores SETTINGS_MAX_CONCURRENT_STREAMS; it keeps to one rule only, the
connection's flow-control window for DATA (a client breaking that loses the connection, which
tests nothing else). A reader thread acknowledges the server's SETTINGS and PINGs (so the
connection is not closed for that), counts the window the server grants, and records how each
stream ended: its `grpc-status`, or the RST_STREAM error code the server refused it with.
"""

from __future__ import annotations

import socket
import struct
import threading
from dataclasses import dataclass, field
from typing import Sequence

import hpack
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

__all__ = ["REFUSED_STREAM", "Call", "RawHttp2Connection", "StreamEnds", "grpc_message"]

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
REFUSED_STREAM = 0x7  # RFC 9113 §7: the server did not process the stream; a client may retry it
_LARGEST_WINDOW = 2**31 - 1
_DEFAULT_WINDOW = 65_535
_SMALLEST_MAX_FRAME = 16_384  # SETTINGS_MAX_FRAME_SIZE's initial value


def grpc_message(payload: bytes) -> bytes:
    """One gRPC length-prefixed message: not compressed, its length, the bytes."""
    return struct.pack(">BI", 0, len(payload)) + payload


@dataclass(frozen=True)
class Call:
    """The frames of one call on its own stream, and the DATA bytes among them (what flow control counts)."""

    frames: bytes
    data_bytes: int


@dataclass
class StreamEnds:
    """How the server ended each stream (by id), as the reader saw it."""

    statuses: dict[int, str] = field(default_factory=dict)  # grpc-status of the trailers
    resets: dict[int, int] = field(default_factory=dict)  # RST_STREAM error code
    goaway: int | None = None  # the connection's GOAWAY error code, once one came
    closed: bool = False  # the connection ended
    broken: str | None = None  # what the reader could not read, if anything

    def ended(self) -> int:
        return len(self.statuses) + len(self.resets)


class RawHttp2Connection:
    """One h2c connection to `host:port` that sends gRPC calls without any stream bookkeeping."""

    def __init__(self, host: str, port: int) -> None:
        self._socket = socket.create_connection((host, port), timeout=30)
        self._write_lock = threading.Lock()
        self._encoder = hpack.Encoder()
        self._decoder = hpack.Decoder()
        self._decoder.max_allowed_table_size = 4096
        self._host = f"{host}:{port}"
        self._next_stream = 1
        self._lock = threading.Lock()
        self._window = threading.Condition()
        self._granted = _DEFAULT_WINDOW  # the connection's window for our DATA, as the server's WINDOW_UPDATEs grow it
        self._sent = 0  # DATA bytes sent
        self.ends = StreamEnds()
        # Our windows as large as HTTP/2 allows: the server never waits on us to send its replies.
        self._write(PREFACE + SettingsFrame(0, settings={SettingsFrame.INITIAL_WINDOW_SIZE: _LARGEST_WINDOW,
                                                         SettingsFrame.ENABLE_PUSH: 0}).serialize()
                    + WindowUpdateFrame(0, window_increment=_LARGEST_WINDOW - _DEFAULT_WINDOW).serialize())
        self._reader = threading.Thread(target=self._read, name="raw-http2-reader", daemon=True)
        self._reader.start()

    def call_frames(self, path: str, message: bytes, metadata: Sequence[tuple[str, str]] = (),
                    data: bytes | None = None) -> Call:
        """The frames of one unary gRPC call on a new stream: HEADERS (and CONTINUATIONs), then DATA
        ending the stream: `message` framed, or `data` as it is (a length prefix that lies, say)."""
        stream_id = self._next_stream
        self._next_stream += 2
        headers = [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", self._host),
                   ("content-type", "application/grpc"), ("te", "trailers"), *metadata]
        block = self._encoder.encode(headers, huffman=False)  # as sent: the bytes on the wire are the bytes asked for
        # A block over the frame size every peer takes goes on in CONTINUATION frames.
        pieces = [block[at:at + _SMALLEST_MAX_FRAME] for at in range(0, len(block), _SMALLEST_MAX_FRAME)]
        frames = [HeadersFrame(stream_id, data=pieces[0])]
        frames += [ContinuationFrame(stream_id, data=piece) for piece in pieces[1:]]
        frames[-1].flags.add("END_HEADERS")
        payload = grpc_message(message) if data is None else data
        frames.append(DataFrame(stream_id, data=payload, flags=["END_STREAM"]))
        return Call(b"".join(frame.serialize() for frame in frames), len(payload))

    def send(self, calls: Sequence[Call], timeout_s: float = 60.0) -> None:
        """Write `calls` in order, as many at once as the connection's window lets their DATA go,
        whatever the server said about streams."""
        batch: list[bytes] = []
        room = 0
        for call in calls:
            if call.data_bytes > room:
                self._write(b"".join(batch))
                batch = []
                room = self._room_for(call.data_bytes, timeout_s)
            batch.append(call.frames)
            room -= call.data_bytes
            self._sent += call.data_bytes
        self._write(b"".join(batch))

    def _room_for(self, needed: int, timeout_s: float) -> int:
        with self._window:
            if not self._window.wait_for(lambda: self._granted - self._sent >= needed or self.ends.closed, timeout_s):
                raise TimeoutError(f"the server granted no window for {needed} bytes of DATA in {timeout_s} s")
            return self._granted - self._sent

    @property
    def opened(self) -> int:
        """The streams opened so far."""
        return (self._next_stream - 1) // 2

    def close(self) -> None:
        try:
            self._socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._socket.close()
        self._reader.join(timeout=10)

    def _write(self, data: bytes) -> None:
        with self._write_lock:
            self._socket.sendall(data)

    def _read(self) -> None:
        buffer = bytearray()
        try:
            while True:
                chunk = self._socket.recv(1 << 16)
                if not chunk:
                    break
                buffer += chunk
                while len(buffer) >= 9:
                    frame, length = Frame.parse_frame_header(memoryview(bytes(buffer[:9])))
                    if len(buffer) < 9 + length:
                        break
                    frame.parse_body(memoryview(bytes(buffer[9:9 + length])))
                    del buffer[:9 + length]
                    self._seen(frame)
        except OSError:
            pass  # the server, or `close`, ended the connection
        except Exception as error:  # noqa: BLE001 — a frame this reader cannot read: kept for the test to see
            self.ends.broken = repr(error)
        finally:
            with self._window:
                self.ends.closed = True
                self._window.notify_all()

    def _seen(self, frame: Frame) -> None:
        if isinstance(frame, SettingsFrame) and "ACK" not in frame.flags:
            self._write(SettingsFrame(0, flags=["ACK"]).serialize())
        elif isinstance(frame, PingFrame) and "ACK" not in frame.flags:
            self._write(PingFrame(0, opaque_data=frame.opaque_data, flags=["ACK"]).serialize())
        elif isinstance(frame, HeadersFrame):
            # HPACK state is the connection's: every block is decoded, in order, CONTINUATIONs aside
            # (grpcio's replies here fit in one frame).
            headers = dict(self._decoder.decode(bytes(frame.data), raw=False))
            if "grpc-status" in headers:
                with self._lock:
                    self.ends.statuses[frame.stream_id] = headers["grpc-status"]
        elif isinstance(frame, RstStreamFrame):
            with self._lock:
                self.ends.resets.setdefault(frame.stream_id, frame.error_code)
        elif isinstance(frame, WindowUpdateFrame) and frame.stream_id == 0:
            with self._window:
                self._granted += frame.window_increment
                self._window.notify_all()
        elif isinstance(frame, GoAwayFrame):
            self.ends.goaway = frame.error_code
