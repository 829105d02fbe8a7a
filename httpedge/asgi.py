"""The ASGI types every HTTP server and app of ours speaks, named once.

`Scope` is a connection's scope, `Message` one event either way, `Receive`
and `Send` the two callables an app is given, `App` an ASGI application.
The proxy's server (`httpedge.server`), its app (`proxy.app`, `proxy.pipeline.forward`,
`proxy.pipeline.streaming`, `proxy.pipeline.websockets`, `proxy.pipeline.running_calls`) and the replica's ASGI host
(`replica.calling.asgi`) all use these. Pure: type aliases only.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Mapping

__all__ = ["Scope", "Message", "Receive", "Send", "App"]

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
# Takes any mapping, so an app typed with Starlette's (MutableMapping) messages is an `App` too.
Send = Callable[[Mapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]
