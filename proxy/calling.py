"""The seam between the HTTP app and replicas: one call per request, and its failures.

`ReplicaCaller` is what `proxy.app` needs from the outside world; the Ray
implementation lives in `proxy.raycalls`, and component tests pass in fakes.
The exceptions say what the app must answer, so the app never sees a Ray
exception type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from vocabulary.wire import WireRequest, WireResponse

__all__ = ["Batching", "ReplicaCaller", "ReplicaDiedError", "HandlerError"]


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
        self, handle: Any, request: WireRequest, timeout_s: float, batching: Batching | None = None
    ) -> WireResponse:
        """Run `request` on the replica behind `handle`, for at most `timeout_s`;
        with `batching`, as one of a list its handler receives in one call.

        Cancelling the awaiting task, or running out of time, cancels the
        handler on the replica. Raises `ReplicaDiedError`, `HandlerError` or
        `TimeoutError`.
        """
