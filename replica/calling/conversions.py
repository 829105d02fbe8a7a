"""Wire tuples to and from what user code sees.

A request tuple becomes a `starlette.requests.Request`; whatever a handler
returned becomes a response tuple, following docs/guides/specs.md ("User code"):

- a Starlette `Response` is sent as is; a `StreamingResponse` (or any
  response without a ready body, such as a `FileResponse`) streams;
- an (async) generator streams its chunks as text/plain, `str` chunks
  encoded as UTF-8 (a `StreamingResponse` chooses another media type, such
  as text/event-stream for server-sent events);
- `bytes` as application/octet-stream, `str` as text/plain;
- anything else as JSON.

The route prefix the request was routed by is the request's `root_path`.
Once user code has reported a load (`ray_gitops.serving.report_load`, kept in
`ray_gitops.registry.REPORTED_LOAD`), every
answer (streamed ones too) carries the newest value as its last header,
`vocabulary.request_path.wire.LOAD_HEADER`, which the proxy takes off; a multiplexed
replica's answers carry its loaded models after it
(`vocabulary.request_path.wire.MODELS_HEADER`, `vocabulary.request_path.multiplexing.report`).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from typing import Any, AsyncIterable, Iterable, cast

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from replica.calling.asgi import BodyStream, serve_http
from ray_gitops.registry import REPORTED_LOAD, loaded_ids
from vocabulary.request_path.multiplexing import RequestModels
from vocabulary.request_path.multiplexing import report as models_report
from vocabulary.request_path.wire import LOAD_HEADER, MODELS_HEADER, WireRequest, WireResponse, split_root_path

__all__ = ["to_starlette_request", "to_wire_response", "to_reply"]

_STREAMED_TEXT = "text/plain; charset=utf-8"


def to_starlette_request(wire: WireRequest) -> Request:
    method, path, query_string, headers, body = wire
    headers, root_path = split_root_path(headers)
    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": method,
        "path": path,
        "raw_path": path.encode("latin-1", "replace"),
        "root_path": root_path,
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

    request = Request(scope, receive)
    # The body is whole already: Starlette's `body()` would join it with its stream's empty last
    # chunk, a copy of it (tests/component/test_data_socket.py's upload test sees it in the peak).
    request._body = body
    return request


async def to_reply(
    result: Any, wire: WireRequest, models: RequestModels | None = None
) -> WireResponse | BodyStream:
    """A handler's return value as a whole answer, or as a stream when it streams;
    `models`: a multiplexed replica's request (`ray_gitops.registry.begin_models`)."""
    if inspect.isasyncgen(result) or inspect.isgenerator(result):
        # Its items are the handler's to choose; Starlette sends str and bytes and refuses the rest.
        items = cast("Iterable[str | bytes] | AsyncIterable[str | bytes]", result)
        result = StreamingResponse(items, media_type=_STREAMED_TEXT)
    if isinstance(result, Response) and not hasattr(result, "body"):
        answer = await serve_http(result, wire)
        extra = _trailing_headers(models)
        if not extra:
            return answer
        if isinstance(answer, BodyStream):
            return dataclasses.replace(answer, headers=[*answer.headers, *extra])
        return answer[0], [*answer[1], *extra], answer[2]
    return to_wire_response(result, models)


def _trailing_headers(models: RequestModels | None) -> list[tuple[bytes, bytes]]:
    """The reported load, then the loaded models: what the proxy takes off every answer."""
    extra = []
    load = REPORTED_LOAD.value
    if load is not None:
        extra.append((LOAD_HEADER, repr(load).encode()))
    if models is not None:
        extra.append((MODELS_HEADER, models_report(loaded_ids(), models)))
    return extra


def to_wire_response(result: Any, models: RequestModels | None = None) -> WireResponse:
    reply = _to_wire_response(result)
    if REPORTED_LOAD.value is None and models is None:
        return reply
    return reply[0], [*reply[1], *_trailing_headers(models)], reply[2]


def _to_wire_response(result: Any) -> WireResponse:
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
