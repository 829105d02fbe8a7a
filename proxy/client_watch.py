"""Whose clients left while their replica calls ran: one sweep for every request, not a timer each.

A request whose call runs past `after_s` starts watching its client (a
`receive()` waiting for `http.disconnect`); when the client leaves, the
request's task is cancelled, and with it the replica call, and `ClientLeft`
raised in it. Quick requests never watch: they only enter and leave a dict.
One timer, armed only while requests run, sweeps every `after_s / 2`, so a
request starts watching between `after_s` and 1.5 × `after_s` after its
call began. A timer per request was a quarter of the proxy's time for a
noop answer (the event loop's timers are costly to arm and cancel).

Not here: what the request does meanwhile (`proxy.app`).
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, TypeVar

__all__ = ["ClientLeft", "ClientWatch"]

Receive = Callable[[], Awaitable[dict[str, Any]]]
_T = TypeVar("_T")


class ClientLeft(Exception):
    """The client disconnected before its answer; the message says when."""


class _Running:
    __slots__ = ("task", "receive", "watch_from", "watch", "left")

    def __init__(self, task: asyncio.Task[Any], receive: Receive, watch_from: float) -> None:
        self.task = task
        self.receive = receive
        self.watch_from = watch_from
        self.watch: asyncio.Future[dict[str, Any]] | None = None
        self.left = False

    def start_watching(self) -> None:
        self.watch = asyncio.ensure_future(self.receive())
        self.watch.add_done_callback(self._on_message)

    def _on_message(self, message: asyncio.Future[dict[str, Any]]) -> None:
        if message.cancelled() or message.exception() is not None:
            return
        if message.result()["type"] == "http.disconnect" and not self.task.done():
            self.left = True
            self.task.cancel()


class ClientWatch:
    """The requests of one event loop whose calls are running, and the sweep that watches the slow ones."""

    def __init__(self, after_s: float) -> None:
        self._after_s = after_s
        self._running: dict[int, _Running] = {}
        self._sweep_timer: asyncio.TimerHandle | None = None

    def running(self) -> int:
        return len(self._running)

    def watching(self) -> int:
        return sum(1 for running in self._running.values() if running.watch is not None)

    async def unless_client_leaves(self, receive: Receive, work: Awaitable[_T]) -> _T:
        """`work`'s result; if the client disconnects first, `work` is cancelled and `ClientLeft` raised."""
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        running = _Running(task, receive, loop.time() + self._after_s)
        key = id(running)
        self._running[key] = running
        if self._sweep_timer is None:
            self._sweep_timer = loop.call_later(self._after_s / 2, self._sweep)
        try:
            return await work
        except asyncio.CancelledError:
            # The cancellation is ours alone unless someone else (server shutdown) asked too.
            if running.left and task.uncancel() == 0:
                raise ClientLeft("while its request ran; the replica call was cancelled") from None
            raise
        finally:
            del self._running[key]
            if running.watch is not None:
                running.watch.cancel()

    def _sweep(self) -> None:
        self._sweep_timer = None
        if not self._running:
            return  # armed again by the next request
        loop = asyncio.get_running_loop()
        now = loop.time()
        for running in self._running.values():
            if running.watch is None and now >= running.watch_from:
                running.start_watching()
        self._sweep_timer = loop.call_later(self._after_s / 2, self._sweep)
