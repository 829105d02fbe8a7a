"""Handle calls from user code in a replica: choice and calls over Ray, config by long poll.

`HandleRouter` is the `vocabulary.replicas.serving.HandleCalls` the replica host
installs. A target may name an endpoint or a backend, so its first call
subscribes to both controller keys (`endpoint:<name>`, `replicas:<name>`)
and waits for their first answer; a background long poll on the controller
keeps every subscribed key current, as the proxy's does. A call to an
endpoint draws a backend by its traffic weights; then the callee backend's
own routing policy chooses among its replicas with room, as the proxy's
does (`vocabulary.request_path.policies`; power_of_two, `vocabulary.request_path.choosing`, by
default), with the key it reads from the call's first argument
(`KeyReader.read_call`: a `json:` field of a dict or a JSON body); room is
the callee's `max_concurrent_queries` less this replica's calls in flight
to it, leaving out a replica that died under one of this replica's calls
(as the proxy drops it from its pool) until the controller stops listing
it. No room anywhere is backpressure, answered at once rather than
queued. The call is `handle_call` on the callee replica. Made while serving a
request (or a call) that has a deadline, it carries the seconds left of it
(`ray_gitops.registry.current_deadline`): none left, it is not made; run out
while the callee works, it is given up and the callee's task cancelled
(`HandleOutcome.DEADLINE`, `DeadlineExceeded` in user code).

Owns the Ray side of handles; the user-facing API is `ray_gitops.serving`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

import ray
from ray.exceptions import ActorDiedError, ActorUnschedulableError, RayActorError, RayTaskError

from vocabulary.control.actor_apis import ControllerAPI, Remote, ReplicaAPI
from vocabulary.request_path.choosing import Random, WeightedChoice, pick_replica
from vocabulary.control.longpoll import ReplicaInfo, ReplicaSet
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.routing import RoutingConfig
from vocabulary.control.goal_api import CONTROLLER_NAME, LongPollKey
from vocabulary.request_path.policies import Policy, policy_for
from vocabulary.request_path.request_keys import KeyReader
from ray_gitops.registry import current_deadline
from vocabulary.replicas.serving import DeadlineExceeded, HandleOutcome
from vocabulary.request_path.deadlines import Deadline

if TYPE_CHECKING:
    from replica.tracing import ReplicaTracing

__all__ = ["HandleRouter"]

logger = logging.getLogger(__name__)

_UNSEEN = -1
_FIRST_ANSWER_S = 10.0
_RETRY_S = 0.5

HandleResult = tuple[HandleOutcome, Any]


class HandleRouter:
    def __init__(self, subscriber_id: str, namespace: str, rng: Random, tracing: ReplicaTracing | None = None) -> None:
        """`tracing`: each call's `handle.call` span and the trace context it carries (None: off)."""
        self._tracing = tracing
        self._subscriber_id = subscriber_id
        self._namespace = namespace
        self._rng = rng
        self._held: dict[str, int] = {}
        self._payloads: dict[str, Any] = {}
        self._in_flight: dict[str, int] = {}  # replica id -> this replica's calls to it
        self._routing: dict[str, _Routing] = {}  # backend -> its policy, as its replica set says
        # Replicas that died under a call: never chosen again; forgotten once no replica set lists them.
        self._dead: set[str] = set()
        self._answered = asyncio.Event()
        self._poll: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """The replica's event loop, where the long poll runs; asks from other
        threads (sync handlers) are handed to it."""
        self._loop = loop

    def commit_of(self, backend: str) -> str | None:
        key = LongPollKey.replicas(backend)
        if key not in self._held:
            self._follow(key)
        payload = self._payloads.get(key)
        return payload.commit if isinstance(payload, ReplicaSet) else None

    def _follow(self, key: str) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a thread of a sync handler
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._hold, [key])
            return
        self._hold([key])

    async def call(self, target: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> HandleResult:
        deadline = current_deadline()  # the request's, or the handle call's, this code serves
        if deadline is not None and deadline.passed(time.monotonic()):
            return HandleOutcome.DEADLINE, "the request's deadline passed before the call; it was not made"
        try:
            backend = await self._backend_for(target)
        except TimeoutError:
            return HandleOutcome.UNAVAILABLE, f"the controller did not answer within {_FIRST_ANSWER_S:g} s"
        replica_set = self._payloads.get(LongPollKey.replicas(backend))
        if not isinstance(replica_set, ReplicaSet):
            return HandleOutcome.UNAVAILABLE, f"there is no backend or endpoint named '{target}'"
        return await self._call_replica(target, replica_set, args, kwargs, deadline)

    async def _backend_for(self, target: str) -> str:
        """The backend to call: `target` itself, or one drawn by the endpoint's weights."""
        await self._subscribe([LongPollKey.endpoint(target), LongPollKey.replicas(target)])
        endpoint = self._payloads.get(LongPollKey.endpoint(target))
        if not isinstance(endpoint, EndpointConfig):
            return target
        await self._subscribe([LongPollKey.replicas(name) for name in endpoint.traffic])
        return WeightedChoice.from_weights(endpoint.traffic).pick(self._rng.random()) or ""

    async def _call_replica(
        self, target: str, replica_set: ReplicaSet, args: tuple[Any, ...], kwargs: dict[str, Any],
        deadline: Deadline | None = None,
    ) -> HandleResult:
        replicas = tuple(r for r in replica_set.replicas if r.replica_id not in self._dead)
        if not replicas:
            return HandleOutcome.UNAVAILABLE, f"backend '{replica_set.backend}' has no running replica"
        cap = replica_set.max_concurrent_queries
        in_flight = [self._in_flight.get(r.replica_id, 0) for r in replicas]
        routing = self._routing_of(replica_set, replicas)
        if routing.policy is None:
            index = pick_replica(in_flight, cap, self._rng)
        else:
            key = None if routing.reader is None else routing.reader.read_call(args)
            index = routing.policy.choose(in_flight, cap, key, self._rng)
        if index is None:
            return HandleOutcome.BACKPRESSURE, (
                f"backend '{replica_set.backend}' is at capacity: {len(replicas)} replica(s), "
                f"each with {cap} call(s) in flight (max_concurrent_queries)"
            )
        chosen = replicas[index]
        self._in_flight[chosen.replica_id] = self._in_flight.get(chosen.replica_id, 0) + 1
        try:
            callee: Remote[ReplicaAPI] = Remote(chosen.handle)
            if deadline is not None:
                return await self._call_within(callee, target, replica_set.backend, chosen.replica_id, args, kwargs,
                                               deadline)
            if self._tracing is None:
                return HandleOutcome.OK, await callee.call(ReplicaAPI.handle_call, args, kwargs)
            with self._tracing.handle_call(target, replica_set.backend, chosen.replica_id) as carried:
                return HandleOutcome.OK, await callee.call(ReplicaAPI.handle_call, args, kwargs, carried)
        except RayTaskError as error:
            cause = getattr(error, "cause", None)
            if isinstance(cause, DeadlineExceeded):  # the callee found the deadline passed
                return HandleOutcome.DEADLINE, str(cause)
            return HandleOutcome.ERROR, str(error)
        except (RayActorError, ActorUnschedulableError) as error:
            if isinstance(error, ActorDiedError):  # gone for good: the next calls go elsewhere at once
                self._dead.add(chosen.replica_id)
            return HandleOutcome.UNAVAILABLE, f"replica {chosen.replica_id} of '{replica_set.backend}' died: {error}"
        finally:
            self._in_flight[chosen.replica_id] -= 1

    async def _call_within(
        self, callee: Remote[ReplicaAPI], target: str, backend: str, replica_id: str, args: tuple[Any, ...],
        kwargs: dict[str, Any], deadline: Deadline,
    ) -> HandleResult:
        """The call carrying the seconds left of `deadline`, waited for no longer than them: at the deadline
        the callee's task is cancelled (it also stops itself there, on its own clock)."""
        left = deadline.left(time.monotonic())
        if left <= 0:
            return HandleOutcome.DEADLINE, "the request's deadline passed before the call; it was not made"
        with contextlib.ExitStack() as stack:
            carried = None if self._tracing is None else stack.enter_context(
                self._tracing.handle_call(target, backend, replica_id)
            )
            ref = callee.call(ReplicaAPI.handle_call, args, kwargs, carried, deadline_s=left)
            try:
                async with asyncio.timeout(left):
                    return HandleOutcome.OK, await ref
            except TimeoutError:
                pass
            except asyncio.CancelledError:  # the caller's own request ended (its deadline, its client left)
                _cancel(ref)
                raise
        _cancel(ref)
        return HandleOutcome.DEADLINE, (
            f"the request's deadline ({left:.3f} s left when it was made) passed while replica {replica_id} "
            f"of '{backend}' ran the call; it was cancelled"
        )

    def _routing_of(self, replica_set: ReplicaSet, replicas: tuple[ReplicaInfo, ...]) -> _Routing:
        """The backend's policy, rebuilt when its routing changes, told its live `replicas` (the ones
        an index chooses among) when they change."""
        routing = self._routing.get(replica_set.backend)
        if routing is None or routing.config != replica_set.routing:
            routing = _Routing(replica_set.routing)
            self._routing[replica_set.backend] = routing
        ids = tuple(r.replica_id for r in replicas)
        if routing.policy is not None and ids != routing.members:
            routing.policy.members(ids)
            routing.members = ids
        return routing

    # --- the long poll -------------------------------------------------------------

    async def _subscribe(self, keys: list[str]) -> None:
        """Hold `keys` from now on; returns once each has had its first answer."""
        self._hold(keys)
        async with asyncio.timeout(_FIRST_ANSWER_S):
            while any(self._held[key] == _UNSEEN for key in keys):
                await self._answered.wait()

    def _hold(self, keys: list[str]) -> None:
        """Hold `keys` from now on (on the loop); their answers come later."""
        new = [key for key in keys if key not in self._held]
        if not new:
            return
        for key in new:
            self._held[key] = _UNSEEN
        # The listen in flight names the old keys: start one that names all.
        if self._poll is not None:
            self._poll.cancel()
        self._poll = asyncio.ensure_future(self._poll_forever())

    async def _poll_forever(self) -> None:
        failing = False
        while True:
            try:
                controller: Remote[ControllerAPI] = Remote(ray.get_actor(CONTROLLER_NAME, namespace=self._namespace))
                updates = await controller.call(
                    ControllerAPI.listen_for_change, dict(self._held), proxy_id=self._subscriber_id
                )
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 — keep the last config while the controller is away
                if not failing:
                    logger.warning("handles: controller unreachable, keeping the last config: %s", error)
                failing = True
                await asyncio.sleep(_RETRY_S)
                continue
            failing = False
            for key, (snapshot_id, payload) in updates.items():
                if key in self._held:
                    self._held[key], self._payloads[key] = snapshot_id, payload
            listed = {r.replica_id for p in self._payloads.values() if isinstance(p, ReplicaSet) for r in p.replicas}
            self._dead &= listed
            # Replicas gone from every set, with no call in flight: their counters go too (churn must not grow them).
            self._in_flight = {rid: n for rid, n in self._in_flight.items() if n or rid in listed}
            self._answered.set()
            self._answered = asyncio.Event()


def _cancel(ref: object) -> None:
    """Cancel a handle call's task on its callee; best effort: the callee stops at the deadline by itself anyway."""
    with contextlib.suppress(Exception):
        ray.cancel(ref)


class _Routing:
    """One callee backend's routing policy (None: power_of_two) and where it reads its key."""

    def __init__(self, config: RoutingConfig | None) -> None:
        self.config = config
        self.policy: Policy | None = policy_for(config)
        self.reader = KeyReader.from_config(config)
        self.members: tuple[str, ...] = ()
