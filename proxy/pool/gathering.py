"""A batched backend's requests gathered into lists, one handler call per list.

A batched backend (`Batching`: its handler takes a list of requests) is fed
differently from others: every request waits to be gathered, and the
gathered requests leave as one handler call when there are
`max_batch_size` of them or when the first has waited `wait_s`. An idle
backend thus gets batches of one after `wait_s`; a loaded one gets full
batches at once. The settings come with each call, so a changed
`max_batch_size` applies to the next batch. Each request carries the time
it has left, so the replica cancels a handler that runs past its endpoint's
timeout.

How a list is sent is injected (`send`: over a replica's data connection
when it has one, else over Ray — `proxy.pool.replica_calls` decides). No Ray here.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

from vocabulary.control.actor_apis import ReplicaHandle
from proxy.pool.calling import Batching
from proxy.pool.coalescing import Waiting, deliver
from vocabulary.request_path.wire import TimedRequest, CallResult, Reply, WireRequest

__all__ = ["Gatherer"]


class _Gathering:
    """Requests waiting to leave together for one replica of a batched backend."""

    __slots__ = ("waiting", "timer")

    def __init__(self) -> None:
        self.waiting: list[Waiting] = []
        self.timer: asyncio.TimerHandle | None = None


def _ignore_batch(backend: str, size: int) -> None:
    pass


class Gatherer:
    def __init__(
        self,
        send: Callable[[Any, list[TimedRequest]], Awaitable[list[CallResult]]],
        observe_batch: Callable[[str, int], None] | None = None,
    ) -> None:
        """`send(handle, items)` makes one call of a batched handler;
        `observe_batch(backend, size)` is told each batch a handler receives."""
        self._send = send
        self._observe_batch = observe_batch or _ignore_batch
        self._gatherings: dict[Any, _Gathering] = {}
        self._batches: set[asyncio.Task[None]] = set()

    async def call(self, handle: ReplicaHandle, request: WireRequest, timeout_s: float, batching: Batching) -> Reply:
        """`request`'s reply, as one of a list the replica's batched handler receives in one call."""
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
            task = asyncio.ensure_future(deliver(self._send, handle, batch))
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
