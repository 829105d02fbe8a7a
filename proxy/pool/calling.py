"""The seam between the HTTP app and replicas: one call per request, and its failures.

A call answers a `WireResponse`, or a `StreamStart` when the handler streams:
then `stream` yields the rest of it, and `discard` lets it go unread. A
WebSocket is `open_websocket` (what the app sends) and `push` (what the client
sent), both to the one replica that holds the connection.

`ReplicaCaller` is what `proxy.app` needs from the outside world; the Ray
implementation lives in `proxy.shell.raycalls`, and component tests pass in fakes.
The exceptions say what the app must answer, so the app never sees a Ray
exception type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, AsyncGenerator, Protocol

from vocabulary.control.actor_apis import ReplicaHandle
from vocabulary.request_path.wire import StreamStart, WireRequest, WireResponse

__all__ = ["Batching", "Caller", "ReplicaCaller", "StreamCaller", "ReplicaDiedError", "HandlerError"]


@dataclass(frozen=True)
class Batching:
    """A batched backend's settings as its requests are grouped: its handler
    receives up to `max_batch_size` requests in one call, and the first of a
    batch waits at most `wait_s` for the others."""

    backend: str
    max_batch_size: int
    wait_s: float


class ReplicaDiedError(Exception):
    """The replica is gone (died or unreachable): drop it; retry if idempotent."""


class HandlerError(Exception):
    """User code raised; the message holds the replica-side traceback for the log."""


class ReplicaCaller(Protocol):
    async def call(
        self, handle: ReplicaHandle, request: WireRequest, timeout_s: float, batching: Batching | None = None
    ) -> WireResponse | StreamStart:
        """Run `request` on the replica behind `handle`, for at most `timeout_s`;
        with `batching`, as one of a list its handler receives in one call.

        Cancelling the awaiting task, or running out of time, cancels the
        handler on the replica. Raises `ReplicaDiedError`, `HandlerError` or
        `TimeoutError`.
        """


class StreamCaller(Protocol):
    """What streaming answers and WebSockets need beyond `ReplicaCaller`."""

    def stream(self, handle: ReplicaHandle, start: StreamStart) -> AsyncGenerator[bytes, None]:
        """The chunks after `start.first_chunk`; closing the iterator early
        cancels the replica's generator. Raises `ReplicaDiedError`, `HandlerError`."""

    def discard(self, handle: ReplicaHandle, start: StreamStart) -> None:
        """Let a stream go unread (fire and forget)."""

    def open_websocket(
        self, handle: ReplicaHandle, websocket_id: str, request: WireRequest
    ) -> AsyncGenerator[dict[str, Any], None]:
        """What the app sends on WebSocket `websocket_id`; closing it early stops
        the app. Raises `ReplicaDiedError`, `HandlerError`."""

    async def push(self, handle: ReplicaHandle, websocket_id: str, message: dict[str, Any]) -> bool:
        """One message from the client; False when the replica no longer holds the socket."""


class Caller(ReplicaCaller, StreamCaller, Protocol):
    """Everything the proxy's app calls replicas with (`proxy.shell.raycalls.RayCaller`)."""
