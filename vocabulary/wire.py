"""The request/response format between a proxy and a replica.

A request crosses one Ray call as a plain tuple (cheap to pickle, no class
lookups on the hot path); `replica.conversions` rebuilds a Starlette request
for user code and turns whatever the handler returned into a response tuple.

Under load the proxy coalesces requests queued for one replica into one
`handle_batch` call: a list of (request, seconds it may run) in, a list of
(`BatchOutcome`, response or error text) out, in the same order.

Owned here: the tuple layouts. Not here: the conversions to and from
Starlette (`replica.conversions`), routing and the ASGI server (`proxy.app`).
"""

from __future__ import annotations

import enum
from typing import Any

__all__ = [
    "WireRequest",
    "WireResponse",
    "BatchItem",
    "BatchOutcome",
    "BatchResult",
    "make_request",
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
