"""Per-backend replica pools: in-flight counts, the bounded wait queue, dead replicas.

A `ReplicaPool` is the proxy's live view of one backend: which RUNNING
replicas may take requests, how many requests each has in flight (never more
than `max_concurrent_queries`), and who waits for a slot. It lives across
config snapshots so counts survive a table switch; the controller's
`ReplicaSet` updates it in place, batching settings included.

A backend that scales from zero (`cold_start_timeout_s`) holds requests that
find no replica in its wait queue, where the autoscaler sees them as demand,
until a first replica arrives or that time runs out (`NoReplicaError`). A replica that died under a request is
dropped at once and kept out until the controller stops listing it.

Decisions come from `vocabulary.choosing`; this module only keeps the state and
wakes waiters. No Ray, no HTTP.
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Callable, Iterable

from proxy.calling import Batching
from vocabulary.choosing import Admission, Random, admit, pick_replica
from vocabulary.actor_apis import ReplicaHandle
from vocabulary.configs import BatchingConfig

__all__ = ["ReplicaSlot", "ReplicaPool", "NoReplicaError", "QueueFullError"]

# Requests turned away because a backend has no replica are demand too: the
# autoscaler must see them, or a backend at zero replicas never scales up.
_UNSERVED_WINDOW_S = 1.0
_UNSERVED_KEPT = 10_000


class NoReplicaError(Exception):
    """The backend has no RUNNING replica right now (answer 503)."""


class QueueFullError(Exception):
    """Every replica is full and so is the wait queue (answer 503)."""


class ReplicaSlot:
    """One replica and its in-flight count; mutable proxy-side bookkeeping."""

    __slots__ = ("replica_id", "handle", "in_flight")

    def __init__(self, replica_id: str, handle: ReplicaHandle) -> None:
        self.replica_id = replica_id
        self.handle = handle
        self.in_flight = 0

    def __repr__(self) -> str:
        return f"ReplicaSlot({self.replica_id!r}, in_flight={self.in_flight})"


class ReplicaPool:
    def __init__(
        self, backend: str, rng: Random, max_queued: int, max_concurrent: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self.max_concurrent = max_concurrent
        # How requests are grouped for a batched handler; None: one at a time.
        self.batching: Batching | None = None
        self.commit: str | None = None  # the commit its replica set was applied from (for traces)
        # How long a request may wait for a first replica; None: not at all.
        self.cold_start_s: float | None = None
        self._rng = rng
        self._max_queued = max_queued
        self._slots: list[ReplicaSlot] = []
        self._waiters: collections.deque[asyncio.Future[ReplicaSlot]] = collections.deque()
        self._dead: set[str] = set()
        self._clock = clock
        self._unserved: collections.deque[float] = collections.deque(maxlen=_UNSERVED_KEPT)

    # --- what autoscaling and metrics read ---------------------------------

    def ongoing(self) -> int:
        return sum(slot.in_flight for slot in self._slots)

    def queued(self) -> int:
        return len(self._waiters)

    def unserved(self) -> int:
        """Requests turned away in the last second for want of any replica."""
        horizon = self._clock() - _UNSERVED_WINDOW_S
        while self._unserved and self._unserved[0] < horizon:
            self._unserved.popleft()
        return len(self._unserved)

    def replica_ids(self) -> list[str]:
        return [slot.replica_id for slot in self._slots]

    # --- membership --------------------------------------------------------

    def update(
        self,
        max_concurrent: int,
        replicas: Iterable[tuple[str, ReplicaHandle]],
        batching: BatchingConfig | None = None,
        cold_start_s: float | None = None,
    ) -> None:
        """Adopt the controller's RUNNING set and settings; counts of kept replicas carry over."""
        self.max_concurrent = max_concurrent
        self.cold_start_s = cold_start_s
        self.batching = (
            None
            if batching is None
            else Batching(self.backend, batching.max_batch_size, batching.batch_wait_timeout_s)
        )
        listed = dict(replicas)
        # Forget a dead replica once the controller has stopped listing it.
        self._dead &= set(listed)
        current = {slot.replica_id: slot for slot in self._slots}
        self._slots = [
            current.get(replica_id) or ReplicaSlot(replica_id, handle)
            for replica_id, handle in listed.items()
            if replica_id not in self._dead
        ]
        self._after_membership_change()

    def drop(self, slot: ReplicaSlot) -> None:
        """Take a replica that failed under a request out of rotation now."""
        self._dead.add(slot.replica_id)
        self._slots = [s for s in self._slots if s is not slot]
        self._after_membership_change()

    def _after_membership_change(self) -> None:
        if self._slots:
            self._serve_waiters()
        elif self.cold_start_s is None:
            self._fail_waiters(NoReplicaError(self.backend))

    # --- acquiring and releasing ----------------------------------------------

    def try_acquire(self) -> ReplicaSlot | None:
        """A slot now, or None; never waits and never jumps the queue; with no
        replica at all, the request counts as unserved."""
        if not self._slots:
            self._unserved.append(self._clock())
        return self.free_slot()

    def free_slot(self) -> ReplicaSlot | None:
        """A slot at once when one has room and nobody waits in line; else None
        (nothing recorded: `acquire` then waits or refuses)."""
        if self._waiters or not self._slots:
            return None
        return self._take()

    async def acquire(self) -> ReplicaSlot:
        """A slot with room for one more request, waiting in line if all are full
        (or, for a backend that scales from zero, until a first replica starts)."""
        if not self._slots:
            if self.cold_start_s is None:
                self._unserved.append(self._clock())
                raise NoReplicaError(self.backend)
            return await self._wait_in_line(self.cold_start_s)
        if not self._waiters:
            slot = self._take()
            if slot is not None:
                return slot
        return await self._wait_in_line(None)

    async def _wait_in_line(self, limit_s: float | None) -> ReplicaSlot:
        if admit(len(self._waiters), self._max_queued) is Admission.REJECT:
            raise QueueFullError(self.backend)
        waiter: asyncio.Future[ReplicaSlot] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(limit_s):
                return await waiter
        except TimeoutError:
            self._abandon(waiter)
            self._unserved.append(self._clock())
            raise NoReplicaError(self.backend) from None
        except asyncio.CancelledError:
            self._abandon(waiter)
            raise

    def release(self, slot: ReplicaSlot) -> None:
        slot.in_flight -= 1
        if self._waiters:
            self._serve_waiters()

    def _take(self) -> ReplicaSlot | None:
        slots = self._slots
        index = pick_replica([s.in_flight for s in slots], self.max_concurrent, self._rng)
        if index is None:
            return None
        slot = slots[index]
        slot.in_flight += 1
        return slot

    def _serve_waiters(self) -> None:
        while self._waiters:
            slot = self._take()
            if slot is None:
                return
            waiter = self._waiters.popleft()
            waiter.set_result(slot)

    def _fail_waiters(self, error: Exception) -> None:
        while self._waiters:
            self._waiters.popleft().set_exception(error)

    def _abandon(self, waiter: asyncio.Future[ReplicaSlot]) -> None:
        if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
            # The slot was handed over just as the wait was cancelled.
            self.release(waiter.result())
            return
        try:
            self._waiters.remove(waiter)
        except ValueError:
            pass
