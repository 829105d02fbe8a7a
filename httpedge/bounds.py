"""Slow, oversized and excess clients bounded before any app code runs.

uvicorn's httptools protocol buffers headers without limit, gives a request's
headers no deadline (an idle socket or a header dripped a byte at a time is
held for ever) and answers its concurrency limit with a bare 503. The
protocol class built by `protocol_class` fixes those three at the socket:

- a request whose headers pass `max_header_bytes` is answered 431 as soon as
  the raw bytes pass the limit (a 64 MiB header is cut off, not buffered);
- headers not complete `header_timeout_s` after the connection opened (or
  after the first byte of a later request on it) are answered 408;
- a request on a connection beyond `max_connections` is answered 503 with
  `Retry-After` and the connection closed; the app is never called.

Each of these answers ends the connection with a linger
(`httpedge.answers`), so the client reads the answer rather than a
connection reset. The proxy's own server (`httpedge.server`) applies the
same bounds with the same answers; this subclass serves the agent's
listeners. Body deadlines are the app's (`body_timeout_s` is carried here
so one value configures a listener); the app reads the body under it.
Must not: know routes, replicas or the agent.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from httpedge.answers import end_with, header_size, refusal
from httpedge.limits import EdgeLimits

__all__ = ["EdgeLimits", "protocol_class", "uvicorn_options"]


def uvicorn_options(limits: EdgeLimits) -> dict[str, Any]:
    """Keyword arguments for `uvicorn.Config` that apply `limits`."""
    return {"http": protocol_class(limits), "ws": "none", "timeout_keep_alive": limits.keep_alive_s}


def protocol_class(limits: EdgeLimits) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol bounded by `limits` (uvicorn takes a class, not an instance)."""
    return type("BoundedHttpToolsProtocol", (_BoundedProtocol,), {"limits": limits})


class _Refused(Exception):
    """Stops the parser once a request has been answered at the edge."""


class _BoundedProtocol(HttpToolsProtocol):
    limits: ClassVar[EdgeLimits] = EdgeLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._awaiting_headers = True
        self._header_bytes = 0
        self._header_clock: asyncio.TimerHandle | None = None
        self._over_cap = False
        self._refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # uvicorn's protocol declares the narrower transport
        super().connection_made(transport)
        self._over_cap = len(self.connections) > self.limits.max_connections
        self._start_header_clock()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_clock()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        # uvicorn's own, plus the byte count and the edge answers.
        if self._refused:
            return
        self._unset_keepalive_if_required()
        if self._awaiting_headers:
            self._header_bytes += len(data)
            self._start_header_clock()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if not self._refused:
                self.send_400_response("Invalid HTTP request received.")
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():  # a WebSocket, when the server is given a ws protocol
                self._stop_header_clock()
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        if self._awaiting_headers and self._header_bytes > self.limits.max_header_bytes:
            self._refuse(431, "Request header fields too large")

    def on_headers_complete(self) -> None:
        self._awaiting_headers = False
        self._stop_header_clock()
        size = header_size(self.url, self.headers)
        self._header_bytes = 0
        if size > self.limits.max_header_bytes:
            self._refuse(431, "Request header fields too large")
        elif self._over_cap:
            self._refuse(503, "Too many connections", [(b"retry-after", str(self.limits.retry_after_s).encode())])
        if self._refused:
            raise _Refused
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._awaiting_headers = True

    # --- the header deadline ------------------------------------------------------

    def _start_header_clock(self) -> None:
        if self._header_clock is None and not self._refused:
            self._header_clock = self.loop.call_later(self.limits.header_timeout_s, self._headers_too_slow)

    def _stop_header_clock(self) -> None:
        if self._header_clock is not None:
            self._header_clock.cancel()
            self._header_clock = None

    def _headers_too_slow(self) -> None:
        self._header_clock = None
        if self.cycle is not None and not self.cycle.response_complete:
            self._start_header_clock()  # the previous answer is still being made: not the client's delay
        elif self._awaiting_headers and not self._refused:
            self._refuse(408, "Request headers not complete in time")

    # --- answering at the edge ------------------------------------------------------

    def _refuse(self, status: int, text: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        self._refused = True
        self._stop_header_clock()
        end_with(self.transport, refusal(status, text, headers))
