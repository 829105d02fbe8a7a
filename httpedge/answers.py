"""The edge's own answers: a status that ends the connection, and the linger that delivers it.

Owns the bytes of every answer the edge gives before (or instead of) an app
(400 for a request that does not parse, 408, 431, 503 + Retry-After, see
`httpedge.server`) and how the connection ends after one, or after an app's
answer given before the request was all read: the answer is written, our
side shut for writing, and whatever the client still sends is discarded by
the caller until the client closes (or `LINGER_S` passes), so the client
reads the answer rather than a connection reset. Imports no HTTP server.
"""

from __future__ import annotations

import asyncio
import http

__all__ = ["LINGER_S", "refusal", "end_with", "header_size"]

LINGER_S = 2.0


def refusal(status: int, text: str, headers: list[tuple[bytes, bytes]] | None = None) -> bytes:
    """A complete plain-text answer that closes the connection."""
    body = text.encode()
    lines = [f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}".encode()]
    lines += [b"content-type: text/plain; charset=utf-8", b"content-length: " + str(len(body)).encode()]
    lines += [name + b": " + value for name, value in headers or []]
    lines += [b"connection: close", b"", body]
    return b"\r\n".join(lines)


def end_with(transport: asyncio.Transport, answer: bytes) -> None:
    """Write `answer`, shut our side, and close for good after the linger.

    The caller discards what the client still sends; the client's own close
    ends the connection sooner."""
    transport.write(answer)
    if transport.can_write_eof():
        transport.write_eof()
        asyncio.get_running_loop().call_later(LINGER_S, transport.close)
    else:
        transport.close()


def header_size(url: bytes, headers: list[tuple[bytes, bytes]]) -> int:
    """The bytes a request's target and headers count against `max_header_bytes`."""
    return len(url) + sum(len(name) + len(value) + 4 for name, value in headers)
