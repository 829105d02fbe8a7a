"""What the built-in apps (`ray_gitops.llm`, `ray_gitops.v2`) share of ASGI.

The type names of an ASGI app's three arguments; `whole_body`, a request's
body read to its end; `no_lifespan`, the lifespan protocol of an app with
nothing to start or stop (its model loaded with it). No I/O beyond the
`receive` and `send` it is given.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, MutableMapping

__all__ = ["Scope", "Receive", "Send", "whole_body", "no_lifespan"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


async def whole_body(receive: Receive) -> bytes | None:
    """The request's body, every piece joined; None when the client left before its end."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def no_lifespan(receive: Receive, send: Send) -> None:
    """Answer the lifespan protocol's startup and shutdown at once."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
