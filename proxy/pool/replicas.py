"""Per-backend replica pools: in-flight counts, the bounded wait queue, dead replicas.

A `ReplicaPool` is the proxy's live view of one backend: which RUNNING
replicas may take requests, how many requests each has in flight (never more
than `max_concurrent_queries`), and who waits for a slot. It lives across
config snapshots so counts survive a table switch; the controller's
`ReplicaSet` updates it in place, batching settings included.

A backend that scales from zero (`cold_start_timeout_s`) holds requests that
find no replica in its wait queue, where the autoscaler sees them as demand,
until a first replica arrives or that time runs out (`NoReplicaError`). A replica that died under a request is
dropped at once and kept out until the controller stops listing it. When such
drops (deaths, stalls) take a backend's last replica, the controller is
replacing it: requests wait in line for the replacement, for at most
`REPLACEMENT_WAIT_S` after the last one went (and their own deadline), rather
than 503 at once; a backend that never had a replica still answers 503 at once.

Each slot keeps its replica's progress (`proxy.pool.stalls.ReplicaProgress`): the
request path says when a call is sent, answered or ended, and when one ran out
its endpoint's timeout (`timed_out`). A replica the stall rule finds hung is
taken out of routing at once like a dead one, its other outstanding calls are
cancelled (the request path retries the idempotent ones elsewhere, answers
504 to the rest: `cancelled_by_stall`), and it is listed by `stalled()` for
the controller, which replaces it, until the controller stops listing it.

Decisions come from `vocabulary.request_path.choosing` (power_of_two, the default, called
directly so its path costs what it always did) or from the backend's routing
policy (`vocabulary.request_path.policies`), which also sees the request's key (`vocabulary.request_path.request_keys`);
a request waiting in line keeps its key, so the policy decides for it too when a
slot frees. A multiplexed backend (`[backends.X.multiplex]`) is routed by
`proxy.pool.multiplexing` instead, its key the request's model id: each slot keeps
the models its replica last said it holds (`note_models`), plus the ones sent
to it since (so the requests that follow a model's first go where it loads).
An [llm] backend with LoRA adapters (`llm_adapters`) is routed the same way,
its key the JSON body's `model` field when it names one of the adapters (a
request for the base model, or any other, is routed by power_of_two).
A replica that fails far more than the backend's others is ejected for a
while (`proxy.pool.outliers`, as the endpoint's `[outliers]` says): the
request path tells `answered` each call's success or error; while ejected a
replica is skipped by every pick as if it were full (unless every replica of
the backend is ejected), and one ejected too often is listed by `ejected()`
as worn out, for the controller to replace like a stalled one. Its `circuit`
(`proxy.pool.circuit`) counts the retries in flight to the backend, which the
request path holds, with the queue's length, against an endpoint's `[circuit]`.

This module only keeps the state and wakes waiters. No Ray, no HTTP.
"""

from __future__ import annotations

import asyncio
import collections
import time
import weakref
from typing import Any, Callable, Iterable

from proxy.pool.calling import Batching
from proxy.pool.multiplexing import ModelAffinity, hot_ongoing
from vocabulary.request_path.policies import Policy, policy_for
from vocabulary.request_path.request_keys import KeyReader
from vocabulary.spec.keys import KeyKind
from proxy.pool.circuit import Circuit
from proxy.pool.outliers import Ejection, OutlierDetector
from proxy.pool.retrying import RetryBudget
from proxy.pool.stalls import ReplicaProgress, Stall
from vocabulary.request_path.choosing import Admission, Random, admit, pick_replica
from vocabulary.control.actor_apis import ReplicaHandle
from vocabulary.spec.backends import BatchingConfig
from vocabulary.spec.routing import ModelIdRule, MultiplexConfig, RoutingConfig
from vocabulary.spec.traffic_policy import OutliersConfig
from vocabulary.request_path.multiplexing import ModelReport, parse_report
from vocabulary.request_path.wire import WireRequest

__all__ = ["ReplicaSlot", "ReplicaPool", "NoReplicaError", "QueueFullError", "REPLACEMENT_WAIT_S"]

# Requests turned away because a backend has no replica are demand too: the
# autoscaler must see them, or a backend at zero replicas never scales up.
_UNSERVED_WINDOW_S = 1.0
_UNSERVED_KEPT = 10_000
# How long after dropping a backend's last replica (died, stalled) its requests
# wait for the controller's replacement: a replacement starts in seconds; a
# backend still without one after this answers 503 at once again.
REPLACEMENT_WAIT_S = 30.0


class NoReplicaError(Exception):
    """The backend has no RUNNING replica right now (answer 503)."""


class QueueFullError(Exception):
    """Every replica is full and so is the wait queue (answer 503)."""


class ReplicaSlot:
    """One replica and its in-flight count; mutable proxy-side bookkeeping."""

    __slots__ = ("replica_id", "handle", "in_flight", "reported", "progress", "models")

    def __init__(self, replica_id: str, handle: ReplicaHandle) -> None:
        self.replica_id = replica_id
        self.handle = handle
        self.in_flight = 0
        self.progress = ReplicaProgress(replica_id)
        # The load its user code last reported (`ray_gitops.serving.report_load`), carried by its answers.
        self.reported: float | None = None
        # A multiplexed backend: the models it last said it holds, plus those sent to it since.
        self.models: frozenset[str] = frozenset()

    def note_models(self, value: bytes) -> ModelReport | None:
        """Its answer's `MODELS_HEADER`: what it holds now (None: not a report)."""
        report = parse_report(value)
        if report is not None:
            self.models = report.loaded
        return report

    def note_load(self, value: bytes) -> None:
        try:
            number = float(value)
        except ValueError:
            return
        if number >= 0 and number != float("inf"):
            self.reported = number

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
        # The routing policy and where it reads its key; None: power_of_two, no key.
        self.routing: RoutingConfig | None = None
        self._policy: Policy | None = None
        self._key_reader: KeyReader | None = None
        # Many models per replica: where the model id is read, and the routing by it; None: not multiplexed.
        self.multiplex: MultiplexConfig | None = None
        self.model_ids: ModelIdRule | None = None  # its ids as checked per request (set with `multiplex`)
        self._models: ModelAffinity | None = None
        # An [llm] backend's LoRA adapters, routed like models by the body's `model`; empty: none.
        self.adapters: frozenset[str] = frozenset()
        self._adapter_reader: KeyReader | None = None
        self._rng = rng
        self._max_queued = max_queued
        self._slots: list[ReplicaSlot] = []
        self._waiters: collections.deque[tuple[asyncio.Future[ReplicaSlot], bytes | None]] = collections.deque()
        self._dead: set[str] = set()
        self._emptied_at: float | None = None  # when a drop took the last replica (None: it has some, or never had)
        self._clock = clock
        self._unserved: collections.deque[float] = collections.deque(maxlen=_UNSERVED_KEPT)
        # Replicas found hung (proxy.pool.stalls), kept out and reported until the controller drops them.
        self._stalled: dict[str, Stall] = {}
        self._stall_cancelled: weakref.WeakSet[asyncio.Task[object]] = weakref.WeakSet()
        self.stalls = 0  # replicas of this backend found stalled since the proxy started
        # Requests and retries of the last seconds (proxy.pool.retrying): what retries may still spend.
        self.retry_budget = RetryBudget()
        # Replicas failing far more than the others, out of routing for a while (proxy.pool.outliers).
        self.outliers = OutlierDetector()
        # Retries in flight, against the endpoints' [circuit] limits (proxy.pool.circuit).
        self.circuit = Circuit()

    # --- what autoscaling and metrics read ---------------------------------

    def ongoing(self) -> int:
        return sum(slot.in_flight for slot in self._slots)

    def by_model(self) -> bool:
        """Whether requests are routed by their model (multiplexed, or an [llm] backend's adapters)."""
        return self._models is not None

    def scaling_ongoing(self) -> int:
        """What the autoscaler is told is in flight: `ongoing()`, or for a multiplexed
        backend, as if every replica were as busy as those holding its hottest model."""
        if self._models is None:
            return self.ongoing()
        return hot_ongoing([s.in_flight for s in self._slots], [s.models for s in self._slots])

    def queued(self) -> int:
        return len(self._waiters)

    def reported(self) -> float | None:
        """The sum of the loads its replicas last reported (`ray_gitops.serving.report_load`); None: none has."""
        values = [slot.reported for slot in self._slots if slot.reported is not None]
        return sum(values) if values else None

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
        routing: RoutingConfig | None = None,
        multiplex: MultiplexConfig | None = None,
        llm_adapters: Iterable[str] = (),
    ) -> None:
        """Adopt the controller's RUNNING set and settings; counts of kept replicas carry over."""
        self.max_concurrent = max_concurrent
        adapters = frozenset(llm_adapters)
        if multiplex != self.multiplex or adapters != self.adapters:
            self.multiplex = multiplex
            self.model_ids = None if multiplex is None else multiplex.id_rule()
            self.adapters = adapters
            self._adapter_reader = KeyReader(KeyKind.JSON, "model") if adapters else None
            self._models = None if multiplex is None and not adapters else ModelAffinity()
        if routing != self.routing:
            self.routing = routing
            self._policy = policy_for(routing)
            self._key_reader = KeyReader.from_config(routing)
        self.cold_start_s = cold_start_s
        self.batching = (
            None
            if batching is None
            else Batching(self.backend, batching.max_batch_size, batching.batch_wait_timeout_s)
        )
        listed = dict(replicas)
        # Forget a dead or stalled replica once the controller has stopped listing it.
        self._dead &= set(listed)
        self._stalled = {rid: stall for rid, stall in self._stalled.items() if rid in listed}
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
        if not self._slots:
            self._emptied_at = self._clock()
        self._after_membership_change()

    def _replacement_wait_s(self) -> float | None:
        """How much longer requests wait for a replacement of the replicas drops took; None: not at all."""
        if self._emptied_at is None:
            return None
        left = self._emptied_at + REPLACEMENT_WAIT_S - self._clock()
        return left if left > 0 else None

    # --- progress and stalls (proxy.pool.stalls) ------------------------------------

    def stalled(self) -> dict[str, str]:
        """The replicas found stalled that the controller still lists: id -> what was seen."""
        return {rid: stall.message() for rid, stall in self._stalled.items()}

    def timed_out(self, slot: ReplicaSlot, call: asyncio.Task[object], now: float) -> Stall | None:
        """`call` ran out its endpoint's timeout on `slot`: when that makes the replica
        stalled, take it out of routing and cancel its other outstanding calls."""
        stall = slot.progress.timed_out(call, now)
        if stall is None:
            return None
        self.stalls += 1
        self._stalled[slot.replica_id] = stall
        for other in slot.progress.calls():
            if other is not call and isinstance(other, asyncio.Task) and not other.done():
                self._stall_cancelled.add(other)
                other.cancel()
        self.drop(slot)
        return stall

    # --- outliers (proxy.pool.outliers) ----------------------------------------------

    def answered(self, slot: ReplicaSlot, failed: bool, config: OutliersConfig) -> list[Ejection]:
        """A call to `slot`'s replica ended in a success or an error (`failed`: a 5xx, a handler that
        raised, a call past its timeout), judged by its endpoint's `[outliers]`: the ejections it made."""
        return self.outliers.answered(slot.replica_id, failed, self._clock(), config, self.replica_ids())

    def ejected(self) -> dict[str, dict[str, Any]]:
        """The replicas ejected now (the worn out ones included, until the controller stops listing them),
        as the controller is told: id -> reason, count, seconds left (`back_in_s`), whether to `replace` it."""
        if not self.outliers.any():
            return {}
        now = self._clock()
        return {
            rid: {"reason": e.reason, "count": e.count, "back_in_s": max(0.0, e.until - now), "replace": e.replace}
            for rid, e in self.outliers.ejected(now).items()
        }

    def _out(self) -> frozenset[str]:
        """The ejected replicas a pick skips now: none when that would leave no replica."""
        out = frozenset(self.outliers.ejected(self._clock()))
        if all(slot.replica_id in out for slot in self._slots):
            return frozenset()
        return out

    def cancelled_by_stall(self, call: asyncio.Task[object]) -> bool:
        """Whether `call` was cancelled because its replica stalled (asked once per cancellation)."""
        if call not in self._stall_cancelled:
            return False
        self._stall_cancelled.discard(call)
        return True

    def _after_membership_change(self) -> None:
        self.outliers.members([slot.replica_id for slot in self._slots])
        if self._policy is not None:
            self._policy.members([slot.replica_id for slot in self._slots])
        if self._models is not None:
            self._models.members([slot.replica_id for slot in self._slots])
        if self._slots:
            self._emptied_at = None
            self._serve_waiters()
        elif self.cold_start_s is None and self._replacement_wait_s() is None:
            self._fail_waiters(NoReplicaError(self.backend))

    # --- acquiring and releasing ----------------------------------------------

    def request_key(self, request: WireRequest) -> bytes | None:
        """The key this backend's routing policy reads from `request` (a multiplexed
        backend: its model id; an [llm] backend with adapters: the adapter its `model` names);
        None when the policy reads none or the request carries none."""
        if self.multiplex is not None:
            wanted = self.multiplex.header_key()
            for name, value in request[3]:
                if name == wanted:
                    return value
            return None
        if self._adapter_reader is not None:
            model = self._adapter_reader.read(request)
            return model if model is not None and model.decode("utf-8", "replace") in self.adapters else None
        reader = self._key_reader
        return None if reader is None else reader.read(request)

    def try_acquire(self, key: bytes | None = None) -> ReplicaSlot | None:
        """A slot now, or None; never waits and never jumps the queue; with no
        replica at all, the request counts as unserved."""
        if not self._slots:
            self._unserved.append(self._clock())
        return self.free_slot(key)

    def free_slot(self, key: bytes | None = None, avoid: frozenset[str] = frozenset()) -> ReplicaSlot | None:
        """A slot at once when one has room and nobody waits in line; else None
        (nothing recorded: `acquire` then waits or refuses). `avoid`: replicas a
        retry should not go to, unless no other has room."""
        if self._waiters or not self._slots:
            return None
        if avoid and self._models is None:
            slot = self._take(key, avoid)
            if slot is not None:
                return slot
        return self._take(key)

    async def acquire(self, key: bytes | None = None) -> ReplicaSlot:
        """A slot with room for one more request, waiting in line if all are full (or, with
        none at all, until a first replica starts for a backend that scales from zero, or a
        replacement for one whose last replica was dropped)."""
        if not self._slots:
            limit_s = self.cold_start_s if self.cold_start_s is not None else self._replacement_wait_s()
            if limit_s is None:
                self._unserved.append(self._clock())
                raise NoReplicaError(self.backend)
            return await self._wait_in_line(limit_s, key)
        if not self._waiters:
            slot = self._take(key)
            if slot is not None:
                return slot
        return await self._wait_in_line(None, key)

    async def _wait_in_line(self, limit_s: float | None, key: bytes | None) -> ReplicaSlot:
        if admit(len(self._waiters), self._max_queued) is Admission.REJECT:
            raise QueueFullError(self.backend)
        waiter: asyncio.Future[ReplicaSlot] = asyncio.get_running_loop().create_future()
        self._waiters.append((waiter, key))
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

    def _take(self, key: bytes | None = None, avoid: frozenset[str] = frozenset()) -> ReplicaSlot | None:
        slots = self._slots
        policy = self._policy
        if self._models is not None:
            return self._take_for_model(key)
        full = self.max_concurrent
        if self.outliers.any():  # asked first: a backend with no replica ejected pays one call a pick
            avoid = avoid | self._out()
        # A replica to avoid (or ejected) counts as full, so no policy picks it.
        in_flight = [full if s.replica_id in avoid else s.in_flight for s in slots] if avoid else [
            s.in_flight for s in slots
        ]
        if policy is None:
            index = pick_replica(in_flight, full, self._rng)
        else:
            reported = [s.reported for s in slots if s.reported is not None]
            loads = reported if len(reported) == len(slots) else None  # every replica reported, or none counts
            index = policy.choose(in_flight, full, key, self._rng, loads)
        if index is None:
            return None
        slot = slots[index]
        slot.in_flight += 1
        return slot

    def _take_for_model(self, key: bytes | None) -> ReplicaSlot | None:
        assert self._models is not None
        slots = self._slots
        model = None if key is None else key.decode("utf-8", "replace")
        out = self._out() if self.outliers.any() else frozenset()
        full = self.max_concurrent
        index = self._models.choose(
            [full if s.replica_id in out else s.in_flight for s in slots], full, model, self._rng,
            [s.models for s in slots],
        )
        if index is None:
            return None
        slot = slots[index]
        slot.in_flight += 1
        if model is not None and model not in slot.models:
            slot.models = slot.models | {model}  # it loads there: the next request for it follows
        return slot

    def _serve_waiters(self) -> None:
        while self._waiters:
            slot = self._take(self._waiters[0][1])
            if slot is None:
                return
            waiter, _key = self._waiters.popleft()
            waiter.set_result(slot)

    def _fail_waiters(self, error: Exception) -> None:
        while self._waiters:
            self._waiters.popleft()[0].set_exception(error)

    def _abandon(self, waiter: asyncio.Future[ReplicaSlot]) -> None:
        if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
            # The slot was handed over just as the wait was cancelled.
            self.release(waiter.result())
            return
        for entry in self._waiters:
            if entry[0] is waiter:
                self._waiters.remove(entry)
                return
