"""The request/response format between a proxy and a replica.

A request crosses one Ray call as a plain tuple (cheap to pickle, no class
lookups on the hot path); `replica.calling.conversions` rebuilds a Starlette request
for user code and turns whatever the handler returned into a response tuple.

Two calls carry lists: `handle_coalesced` (separate requests the proxy
coalesced into one Ray call under load) and `handle_batch` (one call of a
batched handler). Both take a list of `TimedRequest` (request, seconds it may
run) and answer a list of `CallResult` (`CallOutcome`, response or error
text), in the same order: "batch" is only the user's feature.

A handler's answer that streams crosses as a `StreamStart` (status,
headers, the first chunk, and the id under which the replica holds the rest);
the proxy then pulls the rest through one Ray streaming generator call. A
route prefix reaches the replica as the request's last header,
`ROOT_PATH_HEADER`: a name with a colon cannot come from an HTTP/1.1 client,
so a client cannot forge it. A WebSocket is carried as ASGI message dicts
both ways.

Owned here: the tuple layouts. Not here: the conversions to and from
Starlette (`replica.calling.conversions`), routing and the ASGI server (`proxy.app`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DataAddress",
    "WireRequest",
    "WireResponse",
    "TimedRequest",
    "CallOutcome",
    "CallResult",
    "make_request",
    "StreamStart",
    "Reply",
    "ROOT_PATH_HEADER",
    "LOAD_HEADER",
    "MODELS_HEADER",
    "with_root_path",
    "split_root_path",
]

# (method, path, query_string, headers, body)
WireRequest = tuple[str, str, bytes, list[tuple[bytes, bytes]], bytes]
# (status, headers, body)
WireResponse = tuple[int, list[tuple[bytes, bytes]], bytes]


class CallOutcome(str, enum.Enum):
    OK = "ok"  # with the WireResponse
    ERROR = "error"  # user code raised; with the traceback text, for the proxy's log
    TIMEOUT = "timeout"  # the item's time ran out and its handler was cancelled


# A request in a list call: (request, seconds it may run before its handler is cancelled)
TimedRequest = tuple[WireRequest, float]
CallResult = tuple[CallOutcome, Any]


def make_request(
    method: str,
    path: str,
    query_string: bytes = b"",
    headers: list[tuple[bytes, bytes]] | None = None,
    body: bytes = b"",
) -> WireRequest:
    return (method, path, query_string, headers or [], body)


@dataclass(frozen=True)
class StreamStart:
    """A streaming answer's head: the rest is pulled by `stream_id` from the same replica."""

    status: int
    headers: list[tuple[bytes, bytes]]
    first_chunk: bytes
    stream_id: str


# What one replica call answers: the whole response, or the head of a stream.
Reply = WireResponse | StreamStart

ROOT_PATH_HEADER = b":root-path"
# The replica's reported load (`ray_gitops.serving.report_load`), as the last header of
# an answer; the proxy takes it off before the answer goes on (a colon: no HTTP name).
LOAD_HEADER = b":load"
# A multiplexed replica's loaded models and what the request made it load and
# evict (`vocabulary.request_path.multiplexing.report`), after `LOAD_HEADER` when both are there.
MODELS_HEADER = b":models"


def with_root_path(headers: list[tuple[bytes, bytes]], root_path: str) -> list[tuple[bytes, bytes]]:
    """`headers` plus the route prefix the request was routed by (none for `/`)."""
    if root_path == "/":
        return headers
    return [*headers, (ROOT_PATH_HEADER, root_path.encode())]


def split_root_path(headers: list[tuple[bytes, bytes]]) -> tuple[list[tuple[bytes, bytes]], str]:
    """The client's headers and the route prefix (`""` for `/`), as `with_root_path` joined them."""
    if headers and headers[-1][0] == ROOT_PATH_HEADER:
        return headers[:-1], headers[-1][1].decode()
    return headers, ""


@dataclass(frozen=True, slots=True)
class DataAddress:
    """Where one replica serves frames: its node, its Unix socket (for a proxy
    on that node) and its TCP `(host, port)` with the secret a proxy proves
    itself with (for proxies on other nodes). Either may be None."""

    node: str
    path: str | None
    tcp: tuple[str, int] | None = None
    secret: bytes = field(default=b"", repr=False)
