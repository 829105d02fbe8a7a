"""One call: send this request to a replica of a backend, and bring its answer back.

`Sender.send` is the only way the request path reaches a replica for a plain
request: it takes a slot (`ReplicaPool.free_slot`, else waiting in line with
`acquire`), tells the slot's progress (`proxy.pool.stalls`) the call was
sent and answered, notes the load and models the replica reported on its
answer (`took_load`), checks a call that ran out its deadline for a stalled
replica, and tries a failed request again on another replica as its
endpoint's retry policy says (`proxy.pool.retrying`: which outcomes, how many
tries for its method, within the backend's retry budget and the deadline,
after a jittered backoff; without `[retries]`, a GET, HEAD or OPTIONS whose
replica died or stalled once more). A reply is tried again only before any of
it reached the client: a streamed answer never is. The slot is released when the call ends, except
under a streamed answer: `Held` keeps it until the stream ends. Under an endpoint's `[outliers]`
each call's success or error (a 5xx, a handler that raised, a call past its deadline) is told to
the pool (`ReplicaPool.answered`, `proxy.pool.outliers`), which may eject the replica (a call that ran
out a client's shorter deadline is not the replica's error). A request with a client's deadline carries
the seconds left of it with each try, and a try with none left is not sent. Under its
`[circuit]` (`proxy.pool.circuit`) a request that would wait in line behind `max_pending_requests`
others, or a retry beyond `max_retries` in flight to the backend, is turned away (`CircuitOpen`).

What went wrong is said by the exceptions below; the request path turns
them into its status codes (docs/reference/http.md). The call's deadline is the
caller's (`proxy.pipeline.running_calls`): a cancellation at it is passed on.
No HTTP here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from dataclasses import dataclass
from typing import Callable, Sequence

from proxy.pool.calling import Caller, HandlerError, ReplicaDiedError
from proxy.pool.circuit import Limit
from proxy.pool.outliers import Ejection
from proxy.pool.replicas import NoReplicaError, QueueFullError, ReplicaPool, ReplicaSlot
from proxy.pool.retrying import DEFAULT_POLICY, Outcome, RetryPolicy
from vocabulary.request_path.choosing import Random
from vocabulary.request_path.deadlines import with_deadline
from vocabulary.request_path.multiplexing import ModelReport
from vocabulary.request_path.wire import LOAD_HEADER, MODELS_HEADER, Reply, StreamStart, WireRequest, WireResponse
from vocabulary.spec.traffic_policy import CircuitConfig, OutliersConfig

__all__ = [
    "Sender", "Held", "took_load", "NoBackend", "NoReplica", "QueueFull", "UnknownModel", "HandlerFailed", "ReplicaDied",
    "ReplicaStalled", "NoTimeLeft", "CircuitOpen", "SendError",
]

logger = logging.getLogger(__name__)

DEADLINE_SLACK_S = 0.01  # a cancellation this close to a call's deadline is the deadline's
_NONE: frozenset[str] = frozenset()  # no replica failed the request yet


class SendError(Exception):
    """Why no answer came back (each kind is one status code of the request path)."""


class NoBackend(SendError):
    """The backend has no replica set at all (503)."""


class NoReplica(SendError):
    """No replica now, nor within the wait the pool allows (503; 504 when `after_stall`)."""

    def __init__(self, after_stall: bool) -> None:
        super().__init__("no replica")
        self.after_stall = after_stall


class QueueFull(SendError):
    """Every replica is full and so is the wait queue (503)."""


class UnknownModel(SendError):
    """A multiplexed backend's request names no model its spec serves (400)."""

    def __init__(self, header: str) -> None:
        super().__init__(header)
        self.header = header


class HandlerFailed(SendError):
    """The replica's handler raised (500); its text went to the log."""


class ReplicaDied(SendError):
    """The replica died under the call, and no retry was due or left (502)."""


class ReplicaStalled(SendError):
    """The replica stalled under the call, and no retry was due or left (504)."""


class NoTimeLeft(SendError):
    """No time left (504): the replica stalled under another call with none left to retry (`started`), or the
    deadline passed before a replica was called (not `started`: none was)."""

    def __init__(self, started: bool = True) -> None:
        super().__init__("no time left")
        self.started = started


class CircuitOpen(SendError):
    """A limit of the endpoint's `[circuit]` turned the request away (503 with `Retry-After`)."""

    def __init__(self, limit: Limit) -> None:
        super().__init__(limit.value)
        self.limit = limit


@dataclass(frozen=True, slots=True)
class Held:
    """A streamed answer's head, with the replica slot it keeps until the stream ends."""

    pool: ReplicaPool
    slot: ReplicaSlot
    start: StreamStart


class Sender:
    """Sends requests to the replicas of a backend's pool: one `send` per request."""

    __slots__ = (
        "_caller", "_stalled", "_model_served", "_retried", "_budget_spent", "_ejected", "_circuit_open", "_rng",
    )

    def __init__(
        self, caller: Caller, stalled: Callable[[str], None],
        model_served: Callable[[str, str, bool, Sequence[str]], None],
        retried: Callable[[str, str], None] = lambda backend, outcome: None,
        budget_spent: Callable[[str], None] = lambda backend: None,
        rng: Random | None = None,
        ejected: Callable[[str, Ejection], None] = lambda backend, ejection: None,
        circuit_open: Callable[[str, str], None] = lambda backend, limit: None,
    ) -> None:
        """`stalled(backend)`: a replica of it was found stalled; `model_served(backend, model, loaded,
        evicted)`: a multiplexed backend answered a request for a model its replica holds;
        `retried(backend, outcome)`: a retry was sent after `outcome` ('replica-died', '503', ...);
        `budget_spent(backend)`: a retry was due but its backend's retry budget was spent;
        `rng`: the jitter of the waits before retries; `ejected(backend, ejection)`: a replica of it was
        ejected (`proxy.pool.outliers`); `circuit_open(backend, limit)`: a circuit limit ('pending',
        'retries') turned a request away (`proxy.pool.circuit`)."""
        self._caller = caller
        self._stalled = stalled
        self._model_served = model_served
        self._retried = retried
        self._budget_spent = budget_spent
        self._ejected = ejected
        self._circuit_open = circuit_open
        self._rng = rng or random.Random()

    async def send(
        self, pool: ReplicaPool | None, request: WireRequest, deadline_at: float,
        policy: RetryPolicy = DEFAULT_POLICY, seen: Callable[[str], None] | None = None,
        outliers: OutliersConfig | None = None, circuit: CircuitConfig | None = None,
        travels: bool = False, clients: bool = False,
    ) -> WireResponse | Held:
        """The answer of a replica of `pool`'s backend, tried again on another replica as the endpoint's
        retry `policy` says (`proxy.pool.retrying`: outcomes, tries for the request's method, the
        backend's budget, backoff within the deadline); a streamed answer is never tried again.
        `seen(replica_id)`: told of each replica tried; `outliers`: the endpoint's `[outliers]`, each
        try's success or error judged by it; `circuit`: the endpoint's `[circuit]`, to which the backend's
        requests in line and retries in flight are held; `travels`: each try carries the seconds left to the
        deadline (`vocabulary.request_path.deadlines.with_deadline`; a batched backend's do not, their list
        carries each one's time), and is not sent when none are; `clients`: the deadline is the client's,
        shorter than the endpoint's timeout, so a call it ends is neither an outlier's error nor a stall's
        strike. Must run in the task the deadline cancels."""
        if pool is None:
            raise NoBackend()
        key = pool.request_key(request)  # None unless the backend's routing policy reads a key
        served = None
        if key is not None:
            if pool.multiplex is not None and pool.model_ids is not None:
                if not pool.model_ids.accepts(key.decode("utf-8", "replace")):
                    raise UnknownModel(pool.multiplex.header)
                served = self._served(pool.backend, key, pool.model_ids.label)
            elif pool.adapters:  # an [llm] adapter: the spec names it, so it is its own label
                served = self._served(pool.backend, key, _own_label)
        task: asyncio.Task[object] | None = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        tries = policy.tries(request[0])
        budgeted = policy.budget_percent is not None
        if budgeted:
            pool.retry_budget.requested(loop.time())
        failed = _NONE  # replicas that failed this request: a retry goes elsewhere
        # What the latest failed try ended with: None until one fails (a request that succeeds makes no error).
        last: WireResponse | SendError | None = None
        outcome = ""
        for attempt in range(tries):
            # A retry holds a place of the backend's circuit from `_may_retry` until its try ends.
            if attempt and not await self._may_retry(pool, policy, attempt, outcome, deadline_at, circuit):
                break
            try:
                slot = pool.free_slot(key, failed) or await self._in_line(pool, key, last, circuit)
            except BaseException:
                if attempt:
                    pool.circuit.retry_ended()
                raise
            if seen is not None:
                seen(slot.replica_id)
            held = False
            progress = slot.progress  # proxy.pool.stalls: sent, answered, outstanding since when
            progress.on_sent(task, loop.time())
            try:
                remaining = deadline_at - loop.time()
                wire = request
                if travels and pool.batching is None:
                    if remaining <= 0:
                        raise NoTimeLeft(started=False)
                    wire = with_deadline(request, remaining)
                reply: Reply = took_load(
                    slot, await self._caller.call(slot.handle, wire, remaining, pool.batching), served
                )
                progress.on_answered(task, loop.time())
                if outliers is not None:
                    status = reply.status if isinstance(reply, StreamStart) else reply[0]
                    self._judge(pool, slot, status >= 500, outliers)
                if isinstance(reply, StreamStart):
                    held = True  # the slot stays taken until the stream ends; never tried again
                    return Held(pool, slot, reply)
                if attempt + 1 < tries and reply[0] in policy.statuses:
                    last, outcome = reply, str(reply[0])
                    failed |= {slot.replica_id}
                    continue
                return reply
            except ReplicaDiedError as error:
                pool.drop(slot)
                logger.warning("replica %s of %s died under a request: %s", slot.replica_id, pool.backend, error)
                last, outcome = ReplicaDied(), Outcome.REPLICA_DIED.value
                if Outcome.REPLICA_DIED not in policy.outcomes:
                    raise last from None
            except HandlerError as error:
                progress.on_answered(task, loop.time())
                if outliers is not None:
                    self._judge(pool, slot, True, outliers)
                logger.error("handler of backend %s raised:\n%s", pool.backend, error)
                if attempt + 1 >= tries or 500 not in policy.statuses:
                    raise HandlerFailed() from None
                last, outcome = HandlerFailed(), "500"
            except asyncio.CancelledError:
                if not pool.cancelled_by_stall(task):
                    if not clients and loop.time() >= deadline_at - DEADLINE_SLACK_S:
                        if outliers is not None:
                            self._judge(pool, slot, True, outliers)
                        self._check_stall(pool, slot, task, loop.time())
                    raise
                # Its replica stalled under another request: retry or 504, not a cancellation;
                # unless its own deadline or client ended it too (their answer stands).
                if task.uncancel() > 0:
                    raise
                if loop.time() >= deadline_at - DEADLINE_SLACK_S:
                    raise NoTimeLeft() from None
                last, outcome = ReplicaStalled(), Outcome.REPLICA_STALLED.value
                if Outcome.REPLICA_STALLED not in policy.outcomes:
                    raise last from None
            finally:
                progress.on_ended(task)
                if not held:
                    pool.release(slot)
                if attempt:
                    pool.circuit.retry_ended()
            failed |= {slot.replica_id}
        if last is None or isinstance(last, SendError):
            raise last or ReplicaDied()
        return last

    async def _in_line(
        self, pool: ReplicaPool, key: bytes | None, last: WireResponse | SendError | None,
        circuit: CircuitConfig | None,
    ) -> ReplicaSlot:
        """A slot after waiting in line, unless the endpoint's circuit allows no more requests waiting."""
        if not pool.circuit.may_wait(pool.queued(), circuit):
            self._circuit_open(pool.backend, Limit.PENDING.value)
            raise CircuitOpen(Limit.PENDING)
        return await _acquire(pool, key, isinstance(last, ReplicaStalled))

    async def _may_retry(
        self, pool: ReplicaPool, policy: RetryPolicy, attempt: int, outcome: str, deadline_at: float,
        circuit: CircuitConfig | None,
    ) -> bool:
        """Whether the `attempt`-th retry goes out: within the backend's budget and the deadline, then
        the endpoint's circuit (else `CircuitOpen`), after its backoff (counted as sent, or as refused by
        the budget). When it goes out it holds a place of the backend's circuit until its try ends."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        if policy.budget_percent is not None:
            if not pool.retry_budget.allows(now, policy.budget_percent, policy.min_retries):
                self._budget_spent(pool.backend)
                return False
        wait = policy.backoff(attempt, self._rng)
        if now + wait >= deadline_at - DEADLINE_SLACK_S:
            return False
        if not pool.circuit.may_retry(circuit):
            self._circuit_open(pool.backend, Limit.RETRIES.value)
            raise CircuitOpen(Limit.RETRIES)
        if policy.budget_percent is not None:
            pool.retry_budget.retried(now)
        self._retried(pool.backend, outcome)
        pool.circuit.retry_started()
        if wait > 0:
            try:
                await asyncio.sleep(wait)
            except BaseException:
                pool.circuit.retry_ended()
                raise
        return True

    def _judge(self, pool: ReplicaPool, slot: ReplicaSlot, failed: bool, outliers: OutliersConfig) -> None:
        """Tell the pool's outlier detector how a call to `slot` ended; log and count the ejections made."""
        for ejection in pool.answered(slot, failed, outliers):
            logger.warning("backend %s: %s", pool.backend, ejection.message(ejection.at))
            self._ejected(pool.backend, ejection)

    def _served(self, backend: str, key: bytes, label: Callable[[str], str]) -> Callable[[ModelReport], None]:
        """Counts a multiplexed request under its model's `label` (the model when the spec
        names it, else 'other': a client's ids never become metric labels), once its replica
        holds it, with the load and evictions it caused."""
        model = key.decode("utf-8", "replace")
        model_served = self._model_served

        def served(report: ModelReport) -> None:
            if model in report.loaded:
                model_served(backend, label(model), report.loaded_now, [label(m) for m in report.evicted])

        return served

    def _check_stall(self, pool: ReplicaPool, slot: ReplicaSlot, task: asyncio.Task[object], now: float) -> None:
        """A call ran out its endpoint's timeout: when its replica answered nothing
        meanwhile, it is stalled (`proxy.pool.stalls`): out of routing, reported, counted."""
        stall = pool.timed_out(slot, task, now)
        if stall is not None:
            logger.warning("backend %s: replica %s stalled (%s); taken out of routing", pool.backend,
                           slot.replica_id, stall.message())
            self._stalled(pool.backend)


def _own_label(model: str) -> str:
    return model


async def _acquire(pool: ReplicaPool, key: bytes | None, after_stall: bool) -> ReplicaSlot:
    try:
        return await pool.acquire(key)
    except NoReplicaError:
        raise NoReplica(after_stall) from None
    except QueueFullError:
        raise QueueFull() from None


def took_load(slot: ReplicaSlot, reply: Reply, served: Callable[[ModelReport], None] | None = None) -> Reply:
    """`reply` without the load its replica reported and, for a multiplexed backend,
    the models it holds (its last headers, if any), which the replica's slot keeps
    for the routing policies; `served` is told what the request made it load."""
    headers = reply.headers if isinstance(reply, StreamStart) else reply[1]
    end = len(headers)
    if end and headers[end - 1][0] == MODELS_HEADER:
        report = slot.note_models(headers[end - 1][1])
        if report is not None and served is not None:
            served(report)
        end -= 1
    if end and headers[end - 1][0] == LOAD_HEADER:
        slot.note_load(headers[end - 1][1])
        end -= 1
    if end == len(headers):
        return reply
    if isinstance(reply, StreamStart):
        return dataclasses.replace(reply, headers=headers[:end])
    return reply[0], headers[:end], reply[2]
