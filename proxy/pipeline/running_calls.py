"""The replica calls running on one event loop: their deadlines and their clients, kept by one sweep.

Each request's call runs between `RunningCalls.enter` and `leave`, with
the endpoint's deadline. Past the deadline the request's task is cancelled, and with it the
replica call, and `TimeoutError` is raised in it. A call still running after
`watch_after_s` starts watching its client (a `receive()` waiting for
`http.disconnect`); when the client leaves, the call is cancelled the same
way and `ClientLeft` raised. Quick requests never watch: they only enter and
leave a set. A request's body is read under the same sweep, with the edge's
body deadline (`watch=False`: the read itself sees its client leave). The
request path awaits its call itself, between `enter` and `leave`, and asks
`why_cancelled` what a CancelledError meant: a coroutine wrapped around each
call was a noticeable share of a noop answer's cost in the proxy.

One timer serves every call. It is armed only while calls run, for the
earlier of the next sweep (every `watch_after_s / 2`) and the earliest
deadline, so a deadline fires on time and a call starts watching between
`watch_after_s` and 1.5 × `watch_after_s` after it began. A timer or two per
request (what `asyncio.timeout` arms) was the costliest part of a noop answer
in the proxy: the event loop's timers are dear to arm and cancel.

Not here: the request path around its call (`proxy.pipeline.forward`, `proxy.app`).
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from httpedge.asgi import Receive

__all__ = ["ClientLeft", "RunningCall", "RunningCalls", "WATCH_AFTER_S"]

WATCH_AFTER_S = 0.05  # a request's call running longer than this is watched for its client leaving

_SLACK_S = 0.001  # a timer may fire this much before its time (the loop rounds to its clock's resolution)


class ClientLeft(Exception):
    """The client disconnected before its answer; the message says when."""


class RunningCall:
    """One call between `enter` and `leave`: its task, deadline and client watch."""

    __slots__ = ("task", "receive", "watch_from", "deadline_at", "watch", "ended_by", "cancelling")

    def __init__(self, task: asyncio.Task[Any], receive: Receive, watch_from: float, deadline_at: float) -> None:
        self.task = task
        self.receive = receive
        self.watch_from = watch_from
        self.deadline_at = deadline_at  # on the loop's clock
        self.watch: asyncio.Future[dict[str, Any]] | None = None
        self.ended_by: str | None = None  # "deadline" or "client", once the sweep or the client ended it
        self.cancelling = task.cancelling()  # cancellations asked before it ran (not ours)

    def end(self, reason: str) -> None:
        if self.ended_by is None and not self.task.done():
            self.ended_by = reason
            self.task.cancel()

    def start_watching(self) -> None:
        self.watch = asyncio.ensure_future(self.receive())
        self.watch.add_done_callback(self._on_message)

    def _on_message(self, message: asyncio.Future[dict[str, Any]]) -> None:
        if message.cancelled() or message.exception() is not None:
            return
        if message.result()["type"] == "http.disconnect":
            self.end("client")


class RunningCalls:
    """The calls of one event loop that are running, and the one timer that sweeps them."""

    def __init__(self, watch_after_s: float) -> None:
        self._after_s = watch_after_s
        self._running: set[RunningCall] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    def running(self) -> int:
        return len(self._running)

    def watching(self) -> int:
        return sum(1 for running in self._running if running.watch is not None)

    def enter(self, receive: Receive, timeout_s: float, watch: bool = True) -> RunningCall:
        """The current task's call starts: past `timeout_s` (or once its client,
        read with `receive`, has left; unless not `watch`) the task is cancelled. Pair with `leave`."""
        task = asyncio.current_task()
        assert task is not None
        loop = task.get_loop()
        now = loop.time()
        running = RunningCall(task, receive, now + self._after_s if watch else math.inf, now + timeout_s)
        self._running.add(running)
        self._arm(loop, min(now + self._after_s / 2, running.deadline_at) if watch else running.deadline_at)
        return running

    @staticmethod
    def why_cancelled(running: RunningCall) -> TimeoutError | ClientLeft | None:
        """After the call raised CancelledError: what to raise instead when the
        cancellation was this sweep's (past the deadline, or the client left);
        None when someone else (server shutdown) asked too: let it through."""
        if running.ended_by is None or running.task.uncancel() > running.cancelling:
            return None
        if running.ended_by == "deadline":
            return TimeoutError()
        return ClientLeft("while its request ran; the replica call was cancelled")

    def leave(self, running: RunningCall) -> None:
        """The call is over, however it ended."""
        self._running.discard(running)
        if running.watch is not None:
            running.watch.cancel()

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        """Make sure the sweep runs no later than `when`."""
        if self._timer is not None:
            if self._timer_at <= when:
                return
            self._timer.cancel()  # only for a deadline nearer than the next sweep
        self._timer = loop.call_at(when, self._sweep)
        self._timer_at = when

    def _sweep(self) -> None:
        self._timer, self._timer_at = None, math.inf
        if not self._running:
            return  # armed again by the next call
        loop = asyncio.get_running_loop()
        now = loop.time() + _SLACK_S
        next_at = now + self._after_s / 2
        for running in self._running:
            if running.ended_by is not None:
                continue
            if now >= running.deadline_at:
                running.end("deadline")
                continue
            if running.watch is None and now >= running.watch_from:
                running.start_watching()
            next_at = min(next_at, running.deadline_at)
        self._arm(loop, next_at)
