"""Reading a request's body, bounded: in size, in time, and in the bodies one worker holds at once.

The size limit is the endpoint's `max_body_bytes` under the proxy's ceiling
(413 at once when Content-Length says more, 413 as soon as more arrives);
the time limit the edge's `body_timeout_s` (408), kept by the loop's one sweep
of running calls (`RunningCalls`: an `asyncio.timeout` of its own, a timer armed
and cancelled per body, was 34,000 of the 282,000 instructions of a 1 KiB POST
through the proxy, `bench.proxy_cost`); the budget
(`BodyBudget`) the bytes a worker's requests hold from their first byte read
until they end (503 and Retry-After past it). A client that leaves before
its body is read causes no replica call (`ClientLeft`); a truncated body is
never forwarded. A request without a body (RFC 9112 6.3) reads its one
empty message at once (`unframed`). Whether it has one is read in the same
pass over its headers as its client's `X-Request-Timeout` (`framing`): a
GET's headers are read to the end for the first anyway, so a request
without the second pays one comparison a header for it.
"""

from __future__ import annotations

import asyncio
import io
from typing import Any

from httpedge.asgi import Receive, Scope
from proxy.pipeline.running_calls import ClientLeft, RunningCalls
from proxy.pipeline.transit import CLOSE, Refusal
from proxy.settings import ProxySettings

__all__ = ["BodyBudget", "read", "unframed", "read_body", "request_message", "framed", "framing", "declared_length"]


async def read(
    scope: Scope, receive: Receive, endpoint_limit: int, settings: ProxySettings, budget: BodyBudget,
    calls: RunningCalls,
) -> bytes:
    """The body of a request that frames one (`framed`; one that does not is `unframed`), taken from
    `budget` (the caller gives back its length when the request ends): 413 past `endpoint_limit` or
    the proxy's ceiling (at once when its Content-Length says more: not one byte of it is read), 503
    past the budget, 408 past the edge's `body_timeout_s` (kept by `calls`' sweep), `ClientLeft` if
    the client left."""
    limit = min(endpoint_limit, settings.max_body_bytes)
    declared = declared_length(scope["headers"])
    if declared > limit:
        raise Refusal(413, "Request body too large")
    return await read_body(receive, limit, settings.edge.body_timeout_s, budget, calls, declared)


def unframed(message: dict[str, Any]) -> bytes:
    """The body of a request that frames none (RFC 9112 6.3), from its one empty message, which
    the server hands over at once: b"" (`ClientLeft` when the message says the client went away).
    Not a coroutine: most requests (a GET) frame no body, and a coroutine of their own was 1% of a
    noop GET's instructions in the proxy (`bench.proxy_cost`)."""
    if message["type"] == "http.disconnect":
        request_message(message)  # raises ClientLeft
    return b""


def framed(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether the request says it has a body (Content-Length other than 0, or Transfer-Encoding)."""
    return framing(headers)[0]


def framing(headers: list[tuple[bytes, bytes]]) -> tuple[bool, bytes | None]:
    """Whether the request says it has a body (`framed`), and the value of its first `X-Request-Timeout`
    (`vocabulary.request_path.deadlines.TIMEOUT_HEADER`; None: it sent none): one pass over the headers."""
    has_body, timeout = False, None
    for name, value in headers:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            has_body = True
        elif name == b"x-request-timeout" and timeout is None:  # TIMEOUT_HEADER, as a constant: no global lookup
            timeout = value
    return has_body, timeout


def declared_length(headers: list[tuple[bytes, bytes]]) -> int:
    """The body's length its Content-Length says; 0 without one (or one that is no number, which the
    server refuses before the app is called)."""
    for name, value in headers:
        if name == b"content-length":
            return int(value) if value.strip().isdigit() else 0
    return 0


class BodyBudget:
    """The request body bytes one worker holds at once, from their first byte read until their
    request ends: every endpoint's limit times every connection would be far more memory than a
    worker has, so past the budget a body is refused (503, Retry-After) as it arrives."""

    __slots__ = ("free", "_refusal_headers")

    def __init__(self, size: int, retry_after: list[tuple[bytes, bytes]]) -> None:
        self.free = size
        self._refusal_headers = [*retry_after, *CLOSE]

    def take(self, size: int) -> None:
        if size > self.free:
            raise Refusal(503, "Too many request bodies in flight", self._refusal_headers)
        self.free -= size

    def give(self, size: int) -> None:
        self.free += size


async def read_body(
    receive: Receive, limit: int, timeout_s: float, budget: BodyBudget, calls: RunningCalls, declared: int = 0
) -> bytes:
    """The whole body of a request that frames one, taken from `budget` as it arrives (the caller
    gives it back; a body its Content-Length `declared` is taken whole once it comes in more than
    one message, when its buffer is made): 413 past `limit`, 503 past the budget, 408 past
    `timeout_s` (`calls` cancels the read then), `ClientLeft` if the client went away (what was
    taken of a body not read whole is given back here)."""
    taken = [0]
    reading = calls.enter(receive, timeout_s, watch=False)  # the read sees its client leave itself
    try:
        return await _read_all(receive, limit, budget, taken, declared)
    except asyncio.CancelledError:
        budget.give(taken[0])
        if isinstance(calls.why_cancelled(reading), TimeoutError):
            raise Refusal(408, "Request body not complete in time", CLOSE) from None
        raise
    except BaseException:
        budget.give(taken[0])
        raise
    finally:
        calls.leave(reading)


def request_message(message: dict[str, Any]) -> dict[str, Any]:
    """The request's first message; `ClientLeft` when it says the client went away."""
    if message["type"] == "http.disconnect":
        raise ClientLeft("before its request was read; no replica called")
    return message


async def _read_all(receive: Receive, limit: int, budget: BodyBudget, taken: list[int], declared: int) -> bytes:
    message = request_message(await receive())
    body: bytes = message.get("body", b"")
    if len(body) > limit:
        raise Refusal(413, "Request body too large")
    budget.take(len(body))
    taken[0] = len(body)
    if not message.get("more_body", False):
        return body
    # Written into one buffer that getvalue() hands over as the body: a list of chunks joined at
    # the end would hold a large body twice while it is joined. With a Content-Length it is made
    # at its size, bytes shared with nobody, which CPython's BytesIO fills in place; growing it
    # chunk by chunk instead cost 34-48 ms per 16 MiB body in 64-256 KiB chunks (3 ms presized).
    if declared > len(body):
        budget.take(declared - len(body))
        taken[0] = declared
        chunks = io.BytesIO(bytes(declared))
    else:
        chunks = io.BytesIO()
    chunks.write(body)
    while message.get("more_body", False):
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientLeft("before its body was read; no replica called")  # a truncated body is never forwarded
        chunk = message.get("body", b"")
        if chunks.tell() + len(chunk) > limit:
            raise Refusal(413, "Request body too large")
        if chunks.tell() + len(chunk) > taken[0]:
            budget.take(chunks.tell() + len(chunk) - taken[0])  # beyond what was taken (no Content-Length)
            taken[0] = chunks.tell() + len(chunk)
        chunks.write(chunk)
    chunks.truncate()  # never past what came (the server ends a body short of its length as a disconnect)
    return chunks.getvalue()
