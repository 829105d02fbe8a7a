"""A gRPC call as it crosses from the proxy to a replica, and the status codes of our refusals.

The proxy's gRPC ingress (`proxy.grpc_ingress`) carries a call as an ordinary
`WireRequest` (so slots, retries, the data connection and streaming are the
HTTP path's): method POST, the call's path (`/package.Service/Method`), its
metadata as headers, its one request message as the body, and `GRPC_HEADER`
as the last header. A name with a colon comes from neither an HTTP/1.1
client nor gRPC metadata (the ingress drops such keys), so only the ingress
makes a gRPC call; the replica host tells one by that header
(`is_grpc_call`) and calls the backend's method named by the path's last
segment (`method_of`).

A replica answers a unary call with the reply message as the body (status
200), and a server-streaming call with `FRAMED` as its content type and its
messages each prefixed by their length (`frame`; a 4-byte big-endian length,
as gRPC's own framing without its flag byte), so the proxy finds every
message again however the chunks were cut on the way (`Unframer`).

A call whose requests stream (client-streaming or bidirectional: the
methods an endpoint lists in `grpc_streaming`, or its backends' generated
servicer declares so) crosses instead as a
WebSocket session to the replica (the same wire request, with no body): each
request message one binary message up, the client's half-close the
session's disconnect, each reply one binary message down, and the end of
the call the session's close, whose code says its status: `STREAM_CLOSE_OK`,
or 4000 plus the gRPC code a method ended it with (`close_for_code`, a
WebSocket close code of the private range; `code_for_close` reads it back).

`code_for_status` is the gRPC status code a proxy-made answer's HTTP status
becomes (the mapping gRPC's own `doc/http-grpc-status-mapping.md` gives, and
429 as RESOURCE_EXHAUSTED); codes are the plain numbers of `grpc.StatusCode`.
A method in the replica that ends its call with a code of its own raises
`GrpcAbort`; the replica answers it with the code's HTTP twin
(`status_for_code`, which the metrics count) and the code itself in
`STATUS_HEADER`, which the proxy ends the call with (`code_of`); `code_name`
is a code's name as grpc spells it. Values only.
"""

from __future__ import annotations

from typing import Any

from vocabulary.request_path.wire import WireRequest

__all__ = [
    "GRPC_HEADER",
    "FRAMED",
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "UNAUTHENTICATED",
    "STATUS_HEADER",
    "FramingError",
    "GrpcAbort",
    "Unframer",
    "STREAM_CLOSE_OK",
    "close_for_code",
    "code_for_close",
    "code_for_status",
    "code_name",
    "code_of",
    "status_for_code",
    "frame",
    "grpc_call",
    "is_grpc_call",
    "method_of",
    "service_of",
]

GRPC_HEADER = b":grpc"
FRAMED = b"application/x-gitops-grpc-messages"
# A replica's answer to a call that a method ended with a status code of its own: the code, in decimal.
STATUS_HEADER = b"grpc-status"

# grpc.StatusCode's numbers (the gRPC spec's), for our own refusals.
OK = 0
CANCELLED = 1
UNKNOWN = 2
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
NOT_FOUND = 5
PERMISSION_DENIED = 7
RESOURCE_EXHAUSTED = 8
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14
UNAUTHENTICATED = 16

_BY_STATUS = (  # (HTTP status, gRPC code): a tuple, the vocabulary keeps no mutable state
    (400, INVALID_ARGUMENT),
    (401, UNAUTHENTICATED),
    (403, PERMISSION_DENIED),
    (404, UNIMPLEMENTED),
    (413, RESOURCE_EXHAUSTED),
    (429, RESOURCE_EXHAUSTED),
    (499, CANCELLED),
    (501, UNIMPLEMENTED),
    (502, UNAVAILABLE),
    (503, UNAVAILABLE),
    (504, DEADLINE_EXCEEDED),
)
_BY_CODE = (  # (gRPC code, HTTP status): a method's own code, as the metrics count its call
    (CANCELLED, 499),
    (INVALID_ARGUMENT, 400),
    (DEADLINE_EXCEEDED, 504),
    (NOT_FOUND, 404),
    (PERMISSION_DENIED, 403),
    (RESOURCE_EXHAUSTED, 429),
    (UNIMPLEMENTED, 501),
    (UNAVAILABLE, 503),
    (UNAUTHENTICATED, 401),
)
STREAM_CLOSE_OK = 1000  # a streaming-request call's session closed normally: OK
_CLOSE_BASE = 4000  # plus a gRPC code: the call ended with that code
_MESSAGE_TOO_BIG = 1009  # the replica's session refused a message over its limit
_NAMES = (  # each code's name, as grpc.StatusCode spells it (a capture record shows it)
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
    "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
    "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
)
_LENGTH_BYTES = 4


def code_for_status(status: int) -> int:
    """The gRPC status code of an answer with HTTP `status` (2xx: OK; an unlisted error: UNKNOWN,
    a 5xx: INTERNAL)."""
    if 200 <= status < 300:
        return OK
    for listed, code in _BY_STATUS:
        if listed == status:
            return code
    return INTERNAL if status >= 500 else UNKNOWN


def status_for_code(code: int) -> int:
    """The HTTP status a call that a method ended with gRPC `code` is counted as (an unlisted code: 500)."""
    for listed, status in _BY_CODE:
        if listed == code:
            return status
    return 500


def close_for_code(code: int) -> int:
    """The close code of a streaming-request call's session that ends it with gRPC `code`."""
    return STREAM_CLOSE_OK if code == OK else _CLOSE_BASE + code


def code_for_close(close: int) -> int:
    """The gRPC code a streaming-request call's session close says (an unknown close: INTERNAL)."""
    if close == STREAM_CLOSE_OK:
        return OK
    if _CLOSE_BASE < close <= _CLOSE_BASE + UNAUTHENTICATED:
        return close - _CLOSE_BASE
    return RESOURCE_EXHAUSTED if close == _MESSAGE_TOO_BIG else INTERNAL


def code_name(code: int) -> str:
    """The name of gRPC status code `code` (`NOT_FOUND`); a number past the spec's, as its digits."""
    return _NAMES[code] if 0 <= code < len(_NAMES) else str(code)


def code_of(status: int, headers: list[tuple[bytes, bytes]]) -> int:
    """The gRPC status code a replica's answer ends its call with: the one its method chose
    (`STATUS_HEADER`, a code from 1 to 16), else `code_for_status` of its HTTP status."""
    for name, value in headers:
        if name == STATUS_HEADER and value.isdigit() and 1 <= int(value) <= UNAUTHENTICATED:
            return int(value)
    return code_for_status(status)


class GrpcAbort(Exception):
    """Raised by a gRPC method in the replica: its call ends with `code` (a `grpc.StatusCode`,
    or its number) and `details`, as `context.abort` ends a grpcio servicer's. User code
    imports it as `ray_gitops.serving.GrpcAbort`."""

    def __init__(self, code: Any, details: str) -> None:
        super().__init__(details)
        number = code.value[0] if isinstance(getattr(code, "value", None), tuple) else code
        if not isinstance(number, int) or not OK < number <= UNAUTHENTICATED:
            raise ValueError(f"GrpcAbort needs a gRPC status code other than OK, not {code!r}")
        self.code = number
        self.details = details


def service_of(path: str) -> str | None:
    """The service a call's path (`/package.Service/Method`) names, or None for a path of another shape."""
    if not path.startswith("/"):
        return None
    service, slash, method = path[1:].partition("/")
    if not slash or not service or not method or "/" in method:
        return None
    return service


def method_of(path: str) -> str:
    """The method a call's path names: its last segment."""
    return path.rpartition("/")[2]


def grpc_call(path: str, metadata: list[tuple[bytes, bytes]], message: bytes) -> WireRequest:
    """The wire request of one call: `metadata` without pseudo-headers, `GRPC_HEADER` last."""
    headers = [(key, value) for key, value in metadata if key[:1] != b":"]
    headers.append((GRPC_HEADER, b""))
    return ("POST", path, b"", headers, message)


def is_grpc_call(wire: WireRequest) -> bool:
    headers = wire[3]
    return bool(headers) and headers[-1][0] == GRPC_HEADER


def frame(message: bytes) -> bytes:
    """`message` prefixed by its length, as a streamed reply carries each one."""
    return len(message).to_bytes(_LENGTH_BYTES, "big") + message


class FramingError(Exception):
    """A streamed reply's bytes are not length-prefixed messages, or one is larger than allowed."""


class Unframer:
    """The messages of a streamed reply, found again from its chunks as they come."""

    __slots__ = ("_buffer", "_max_bytes")

    def __init__(self, max_message_bytes: int) -> None:
        self._buffer = b""
        self._max_bytes = max_message_bytes

    def feed(self, chunk: bytes) -> list[bytes]:
        """The messages `chunk` completes, in order; raises `FramingError` for one over the limit."""
        buffer = self._buffer + chunk if self._buffer else chunk
        messages = []
        start = 0
        while len(buffer) - start >= _LENGTH_BYTES:
            length = int.from_bytes(buffer[start : start + _LENGTH_BYTES], "big")
            if length > self._max_bytes:
                raise FramingError(f"a reply message of {length} bytes is over the limit of {self._max_bytes}")
            end = start + _LENGTH_BYTES + length
            if end > len(buffer):
                break
            messages.append(bytes(buffer[start + _LENGTH_BYTES : end]))
            start = end
        self._buffer = buffer[start:]
        return messages

    def finish(self) -> None:
        """The reply ended: raises `FramingError` if a message was cut short."""
        if self._buffer:
            raise FramingError(f"the reply ended inside a message ({len(self._buffer)} bytes left over)")
