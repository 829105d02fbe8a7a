"""The request/response format between a proxy and a replica.

A request crosses one Ray call as a plain tuple (cheap to pickle, no class
lookups on the hot path); the replica rebuilds a `starlette.requests.Request`
for user code and turns whatever the handler returned into a response tuple,
following PRODUCT.md "User code":

- a Starlette `Response` is sent as is;
- `bytes` as application/octet-stream, `str` as text/plain;
- anything else as JSON.

Under load the proxy coalesces requests queued for one replica into one
`handle_batch` call: a list of (request, seconds it may run) in, a list of
(`BatchOutcome`, response or error text) out, in the same order.

Owned here: the tuple layouts and both conversions. Not here: routing,
replica choice, and the ASGI server (see `proxy.app`).
"""

from __future__ import annotations

import enum
import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

__all__ = [
    "WireRequest",
    "WireResponse",
    "BatchItem",
    "BatchOutcome",
    "BatchResult",
    "make_request",
    "to_starlette_request",
    "to_wire_response",
]

# (method, path, query_string, headers, body)
WireRequest = tuple[str, str, bytes, list[tuple[bytes, bytes]], bytes]
# (status, headers, body)
WireResponse = tuple[int, list[tuple[bytes, bytes]], bytes]


class BatchOutcome(str, enum.Enum):
    OK = "ok"  # with the WireResponse
    ERROR = "error"  # user code raised; with the traceback text, for the proxy's log
    TIMEOUT = "timeout"  # the item's time ran out and its handler was cancelled


# (request, seconds it may run before its handler is cancelled)
BatchItem = tuple[WireRequest, float]
BatchResult = tuple[BatchOutcome, Any]


def make_request(
    method: str,
    path: str,
    query_string: bytes = b"",
    headers: list[tuple[bytes, bytes]] | None = None,
    body: bytes = b"",
) -> WireRequest:
    return (method, path, query_string, headers or [], body)


def to_starlette_request(wire: WireRequest) -> Request:
    method, path, query_string, headers, body = wire
    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": method,
        "path": path,
        "raw_path": path.encode("latin-1", "replace"),
        "root_path": "",
        "scheme": "http",
        "query_string": query_string,
        "headers": headers,
        "client": None,
        "server": None,
    }
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return Request(scope, receive)


def to_wire_response(result: Any) -> WireResponse:
    if isinstance(result, Response):
        return (result.status_code, list(result.raw_headers), bytes(result.body))
    if isinstance(result, (bytes, bytearray, memoryview)):
        return _plain(bytes(result), b"application/octet-stream")
    if isinstance(result, str):
        return _plain(result.encode(), b"text/plain; charset=utf-8")
    payload = json.dumps(result, separators=(",", ":")).encode()
    return _plain(payload, b"application/json")


def _plain(body: bytes, content_type: bytes) -> WireResponse:
    return (
        200,
        [(b"content-type", content_type), (b"content-length", str(len(body)).encode())],
        body,
    )
