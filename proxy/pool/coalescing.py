"""Request coalescing: requests queued for one replica share one Ray call under load.

Each replica gets an outbox. While fewer than `max_calls` fresh calls to it
are in flight, a request is sent at once on its own, so an idle proxy adds
no latency. Otherwise it waits in the outbox, and when a call returns (or
stops being fresh: `window_s` after it was sent, so a slow handler never
holds back the requests behind it for longer) everything waiting leaves
together in one coalesced call. The per-call cost — for Ray, the dominant
cost of a proxy — is then shared by all of them, and coalesced calls grow
exactly as fast as load does. Only Ray calls are coalesced: a replica with
a data connection gets each request as its own frame (`proxy.pool.replica_calls`
decides), where a call costs about what a request does and holding one back
would only add latency.

Each coalesced request carries the time it has left, so the replica cancels
a handler that runs past its endpoint's timeout just as a cancelled single
call would. `deliver` sends a list of waiting requests as one call and
settles each one's future; a batched backend's lists (`proxy.pool.gathering`)
use it too.

A reply that is the head of a stream (`StreamStart`) comes back like any
other; the rest of the stream is one streaming call of its own, never
coalesced (`proxy.app`).

The replica's methods (`ReplicaMethods`) are injected: Ray's in production, a fake in
tests. No Ray here.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Protocol

from proxy.pool.calling import HandlerError, ReplicaDiedError
from vocabulary.control.actor_apis import ReplicaHandle
from vocabulary.request_path.wire import TimedRequest, CallOutcome, CallResult, Reply, WireRequest

__all__ = ["ReplicaMethods", "Coalescer", "Waiting", "deliver"]


class ReplicaMethods(Protocol):
    """The calls a replica answers over Ray (`proxy.shell.raycalls.RayMethods`)."""

    async def one(self, handle: ReplicaHandle, request: WireRequest) -> Reply:
        """One request; raises ReplicaDiedError or HandlerError; cancellable."""

    async def coalesced(self, handle: ReplicaHandle, items: list[TimedRequest]) -> list[CallResult]:
        """Many requests in one call; raises ReplicaDiedError."""

    async def batch(self, handle: ReplicaHandle, items: list[TimedRequest]) -> list[CallResult]:
        """Many requests in one call of a batched handler; raises ReplicaDiedError."""


# (request, deadline on the loop clock, future of its response)
Waiting = tuple[WireRequest, float, "asyncio.Future[Reply]"]


class _Outbox:
    __slots__ = ("calls", "fresh", "waiting")

    def __init__(self) -> None:
        self.calls = 0  # calls in flight
        self.fresh = 0  # of those, the ones sent less than a window ago
        self.waiting: list[Waiting] = []


class _Call:
    """One call in flight: fresh until it returns or its window passes."""

    __slots__ = ("fresh", "timer")

    def __init__(self) -> None:
        self.fresh = True
        self.timer: asyncio.TimerHandle | None = None


class Coalescer:
    """Calls of one request each while a replica is idle, coalesced calls under load."""

    def __init__(self, methods: ReplicaMethods, max_calls: int, window_s: float) -> None:
        self._methods = methods
        self._max_calls = max_calls
        self._window_s = window_s
        self._outboxes: dict[Any, _Outbox] = {}
        self._sending: set[asyncio.Task[None]] = set()

    async def call(self, handle: ReplicaHandle, request: WireRequest, timeout_s: float) -> Reply:
        """`request`'s reply from the replica behind `handle`, within `timeout_s`."""
        outbox = self._outboxes.get(handle)
        if outbox is None:
            outbox = self._outboxes[handle] = _Outbox()
        if outbox.fresh < self._max_calls and not outbox.waiting:
            call = self._start(handle, outbox)
            try:
                return await self._methods.one(handle, request)
            finally:
                self._finish(handle, outbox, call)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Reply] = loop.create_future()
        outbox.waiting.append((request, loop.time() + timeout_s, future))
        # Cancelling the await cancels the future; a coalesced call skips cancelled ones.
        return await future

    def _start(self, handle: ReplicaHandle, outbox: _Outbox) -> _Call:
        outbox.calls += 1
        outbox.fresh += 1
        call = _Call()
        # A slow handler must not hold back the requests behind it for
        # longer than one window: then its call stops counting as fresh.
        call.timer = asyncio.get_running_loop().call_later(self._window_s, self._age, handle, outbox, call)
        return call

    def _age(self, handle: ReplicaHandle, outbox: _Outbox, call: _Call) -> None:
        if call.fresh:
            call.fresh = False
            outbox.fresh -= 1
            self._flush(handle, outbox)

    def _finish(self, handle: ReplicaHandle, outbox: _Outbox, call: _Call) -> None:
        outbox.calls -= 1
        if call.fresh:
            call.fresh = False
            outbox.fresh -= 1
            if call.timer is not None:
                call.timer.cancel()
        self._flush(handle, outbox)

    def _flush(self, handle: ReplicaHandle, outbox: _Outbox) -> None:
        """Send whatever waits if a call may start, or forget an idle replica."""
        if outbox.fresh >= self._max_calls:
            return
        waiting = [entry for entry in outbox.waiting if not entry[2].done()]
        outbox.waiting = []
        if not waiting:
            if outbox.calls == 0:
                self._outboxes.pop(handle, None)
            return
        call = self._start(handle, outbox)
        task = asyncio.ensure_future(self._send_coalesced(handle, outbox, call, waiting))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send_coalesced(
        self,
        handle: ReplicaHandle,
        outbox: _Outbox,
        call: _Call,
        waiting: list[Waiting],
    ) -> None:
        try:
            await deliver(self._methods.coalesced, handle, waiting)
        finally:
            self._finish(handle, outbox, call)

async def deliver(
    send: Callable[[ReplicaHandle, list[TimedRequest]], Awaitable[list[CallResult]]],
    handle: ReplicaHandle,
    waiting: list[Waiting],
) -> None:
    """Send the requests of `waiting` as one call and settle each one's future with its result."""
    now = asyncio.get_running_loop().time()
    try:
        results = await send(handle, [(request, deadline - now) for request, deadline, _ in waiting])
    except ReplicaDiedError as error:
        for _, _, future in waiting:
            _fail(future, ReplicaDiedError(str(error)))
    except Exception as error:  # noqa: BLE001 — every waiter must get an answer
        for _, _, future in waiting:
            _fail(future, HandlerError(f"the call of {len(waiting)} requests failed: {error!r}"))
    else:
        for (_, _, future), result in zip(waiting, results):
            _settle(future, result)


def _settle(future: asyncio.Future[Reply], result: CallResult) -> None:
    if future.done():
        return
    outcome, value = result
    # A str enum: equal to its plain-string value too, however it was pickled.
    if outcome == CallOutcome.OK:
        future.set_result(value)
    elif outcome == CallOutcome.TIMEOUT:
        future.set_exception(TimeoutError())
    else:
        future.set_exception(HandlerError(str(value)))


def _fail(future: asyncio.Future[Reply], error: Exception) -> None:
    if not future.done():
        future.set_exception(error)
