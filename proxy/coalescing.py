"""Request coalescing: requests queued for one replica share one call under load.

Each replica gets an outbox. While fewer than `max_calls` fresh calls to it
are in flight, a request is sent at once on its own, so an idle proxy adds
no latency. Otherwise it waits in the outbox, and when a call returns (or
stops being fresh: `window_s` after it was sent, so a slow handler never
holds back the requests behind it for longer) everything waiting leaves
together in one batch call. The per-call cost — for Ray, the dominant cost
of a proxy — is then shared by the whole batch, and batches grow exactly as
fast as load does. A replica the transport reaches directly (`at_once`: a
frame connection, where a call costs about what a request does) gets every
request at once: holding one back would only add latency, up to a window
behind a slow handler.

Each batched request carries the time it has left, so the replica cancels a
handler that runs past its endpoint's timeout just as a cancelled single
call would.

A batched backend (`Batching`: its handler takes a list of requests) is fed
differently: every request waits to be gathered, and the gathered requests
leave as one handler call when there are `max_batch_size` of them or when
the first has waited `wait_s`. An idle backend thus gets batches of one
after `wait_s`; a loaded one gets full batches at once. The settings come
with each call, so a changed `max_batch_size` applies to the next batch.

A reply that is the head of a stream (`StreamStart`) comes back like any
other; the rest of the stream is one streaming call of its own, never
coalesced (`proxy.app`).

The transport (`Transport`) is injected: Ray in production, a fake in
tests. No Ray here.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Protocol

from proxy.calling import Batching, HandlerError, ReplicaDiedError
from vocabulary.actor_apis import ReplicaHandle
from vocabulary.wire import BatchItem, BatchOutcome, BatchResult, Reply, WireRequest

__all__ = ["Transport", "Coalescer"]


class Transport(Protocol):
    def at_once(self, handle: ReplicaHandle, request: WireRequest) -> Awaitable[Reply] | None:
        """The call of `request`, sent at once, when a call to this replica costs
        too little to be worth holding back for a batch (a frame connection, not
        a Ray call); None: let the coalescer decide."""

    async def one(self, handle: ReplicaHandle, request: WireRequest) -> Reply:
        """One request; raises ReplicaDiedError or HandlerError; cancellable."""

    async def batch(self, handle: ReplicaHandle, items: list[BatchItem]) -> list[BatchResult]:
        """Many requests in one call; raises ReplicaDiedError."""

    async def together(self, handle: ReplicaHandle, items: list[BatchItem]) -> list[BatchResult]:
        """Many requests in one call of a batched handler; raises ReplicaDiedError."""


# (request, deadline on the loop clock, future of its response)
_Waiting = tuple[WireRequest, float, "asyncio.Future[Reply]"]


class _Outbox:
    __slots__ = ("calls", "fresh", "waiting")

    def __init__(self) -> None:
        self.calls = 0  # calls in flight
        self.fresh = 0  # of those, the ones sent less than a window ago
        self.waiting: list[_Waiting] = []


class _Gathering:
    """Requests waiting to leave together for one replica of a batched backend."""

    __slots__ = ("waiting", "timer")

    def __init__(self) -> None:
        self.waiting: list[_Waiting] = []
        self.timer: asyncio.TimerHandle | None = None


class _Call:
    """One call in flight: fresh until it returns or its window passes."""

    __slots__ = ("fresh", "timer")

    def __init__(self) -> None:
        self.fresh = True
        self.timer: asyncio.TimerHandle | None = None


def _ignore_batch(backend: str, size: int) -> None:
    pass


class Coalescer:
    def __init__(
        self,
        transport: Transport,
        max_calls: int,
        window_s: float,
        observe_batch: Callable[[str, int], None] | None = None,
    ) -> None:
        """`observe_batch(backend, size)` is told each batch a batched handler receives."""
        self._transport = transport
        self._max_calls = max_calls
        self._window_s = window_s
        self._observe_batch = observe_batch or _ignore_batch
        self._outboxes: dict[ReplicaHandle, _Outbox] = {}
        self._gatherings: dict[ReplicaHandle, _Gathering] = {}
        self._batches: set[asyncio.Task[None]] = set()

    async def call(
        self, handle: ReplicaHandle, request: WireRequest, timeout_s: float, batching: Batching | None = None
    ) -> Reply:
        if batching is not None:
            return await self._gather(handle, request, timeout_s, batching)
        sent = self._transport.at_once(handle, request)
        if sent is not None:
            # Sent at once, so a request never waits behind a slow one; frames
            # written in one loop iteration still leave in one write.
            return await sent
        outbox = self._outboxes.get(handle)
        if outbox is None:
            outbox = self._outboxes[handle] = _Outbox()
        if outbox.fresh < self._max_calls and not outbox.waiting:
            call = self._start(handle, outbox)
            try:
                return await self._transport.one(handle, request)
            finally:
                self._finish(handle, outbox, call)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Reply] = loop.create_future()
        outbox.waiting.append((request, loop.time() + timeout_s, future))
        # Cancelling the await cancels the future; a batch skips cancelled ones.
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
        task = asyncio.ensure_future(self._send_batch(handle, outbox, call, waiting))
        self._batches.add(task)
        task.add_done_callback(self._batches.discard)

    async def _send_batch(
        self,
        handle: ReplicaHandle,
        outbox: _Outbox,
        call: _Call,
        waiting: list[_Waiting],
    ) -> None:
        try:
            await self._deliver(self._transport.batch, handle, waiting)
        finally:
            self._finish(handle, outbox, call)

    # --- batched backends -------------------------------------------------------

    async def _gather(self, handle: ReplicaHandle, request: WireRequest, timeout_s: float, batching: Batching) -> Reply:
        gathering = self._gatherings.get(handle)
        if gathering is None:
            gathering = self._gatherings[handle] = _Gathering()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Reply] = loop.create_future()
        gathering.waiting.append((request, loop.time() + timeout_s, future))
        if len(gathering.waiting) >= batching.max_batch_size:
            self._send_gathered(handle, gathering, batching)
        elif gathering.timer is None:
            gathering.timer = loop.call_later(batching.wait_s, self._send_gathered, handle, gathering, batching)
        # Cancelling the await cancels the future; a batch skips cancelled ones.
        return await future

    def _send_gathered(self, handle: ReplicaHandle, gathering: _Gathering, batching: Batching) -> None:
        """Send full batches now; what is left waits for a new timer."""
        if gathering.timer is not None:
            gathering.timer.cancel()
            gathering.timer = None
        waiting = [entry for entry in gathering.waiting if not entry[2].done()]
        size = batching.max_batch_size
        while waiting:
            batch, waiting = waiting[:size], waiting[size:]
            self._observe_batch(batching.backend, len(batch))
            task = asyncio.ensure_future(self._deliver(self._transport.together, handle, batch))
            self._batches.add(task)
            task.add_done_callback(self._batches.discard)
            if len(waiting) < size:
                break
        gathering.waiting = waiting
        if waiting:
            loop = asyncio.get_running_loop()
            gathering.timer = loop.call_later(batching.wait_s, self._send_gathered, handle, gathering, batching)
        else:
            self._gatherings.pop(handle, None)

    async def _deliver(
        self,
        send: Callable[[ReplicaHandle, list[BatchItem]], Awaitable[list[BatchResult]]],
        handle: ReplicaHandle,
        waiting: list[_Waiting],
    ) -> None:
        now = asyncio.get_running_loop().time()
        try:
            results = await send(handle, [(request, deadline - now) for request, deadline, _ in waiting])
        except ReplicaDiedError as error:
            for _, _, future in waiting:
                _fail(future, ReplicaDiedError(str(error)))
        except Exception as error:  # noqa: BLE001 — every waiter must get an answer
            for _, _, future in waiting:
                _fail(future, HandlerError(f"batch call failed: {error!r}"))
        else:
            for (_, _, future), result in zip(waiting, results):
                _settle(future, result)


def _settle(future: asyncio.Future[Reply], result: BatchResult) -> None:
    if future.done():
        return
    outcome, value = result
    # A str enum: equal to its plain-string value too, however it was pickled.
    if outcome == BatchOutcome.OK:
        future.set_result(value)
    elif outcome == BatchOutcome.TIMEOUT:
        future.set_exception(TimeoutError())
    else:
        future.set_exception(HandlerError(str(value)))


def _fail(future: asyncio.Future[Reply], error: Exception) -> None:
    if not future.done():
        future.set_exception(error)
