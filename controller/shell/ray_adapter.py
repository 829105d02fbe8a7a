"""Every `ray.*` call the controller makes, behind one class.

Owns creating, finding, calling and killing replica and proxy actors (named,
detached, in the controller's namespace) and each replica's placement group
(named as its actor, reserved before the actor starts, removed when the actor
is killed or found dead, swept when no replica owns it), carrying out the effects the pure
state machines decide (`controller.state.backend_state`, `controller.state.proxy_fleet`),
turning finished Ray calls into `Probe`s for them, node facts, and the
resource check before scale-up. It decides nothing: reads only read, and
every actor start, call or kill is an effect it was given.

Calls are never awaited on the control loop: each remote call's future
stores its outcome in a dict when it finishes, and the next tick reads it.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any, Awaitable, Callable, Sequence, cast

import ray
from ray import ObjectRef
from ray.actor import ActorHandle
from ray.exceptions import RayActorError, RayTaskError
from ray.util.placement_group import PlacementGroup, placement_group, placement_group_table, remove_placement_group
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from controller.state.backend_state import (
    REPLICA_PREFIX,
    CheckHealth,
    DeliverSecrets,
    Effect,
    KillReplica,
    Probe,
    ProbeStatus,
    Reconfigure,
    StartReplica,
    StopReplica,
)
from controller.policies.failure_text import failure_line
from controller.state.proxy_fleet import (
    PROXY_PREFIX,
    PingProxy,
    ProxyEffect,
    ProxyRestarted,
    StartProxy,
    StopProxy,
)
from controller.shell.ray_private import available_resources_per_node, session_dir, upload_working_dir
from controller.state.secrets import SecretKeeper
from vocabulary.spec.backends import BackendConfig
from vocabulary.spec.placement import (
    PlacementStrategy,
    actor_needs,
    replica_bundles,
    spread_node,
    unplaceable,
)
from vocabulary.control.actor_apis import ProxyAPI, Remote, ReplicaAPI
from vocabulary.control.goal_api import REPLICA_CLASS
from vocabulary.replicas.replica_output import OutputCursor, ReplicaOutput
from vocabulary.control.status import HandlerError, ModelStaging, NodeResources

__all__ = ["RayAdapter", "error_text"]

logger = logging.getLogger(__name__)

_PENDING = Probe(ProbeStatus.PENDING)
_REPLICA_CONCURRENCY = 1000
_PROXY_RESTARTS_IN_PLACE = 3
_STAGING_POLL_S = 1.0  # how often a starting replica that stages models is asked how far it is


def error_text(err: BaseException) -> str:
    """The user's own error text and its innermost frame in the user's code,
    without Ray's wrapping (controller.policies.failure_text)."""
    if isinstance(err, RayTaskError):
        cause = getattr(err, "cause", None)
        if cause is not None and not isinstance(cause, RayTaskError):
            # A dual instance (the cause's class too) keeps the traceback only in its text.
            traceback_text = getattr(err, "traceback_str", None) or str(err)
            return failure_line(type(cause).__name__, str(cause), traceback_text)
    lines = [line for line in str(err).strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(err).__name__


def _outcome(future: Future) -> Probe:
    try:
        answer = future.result()
    except RayActorError as err:
        return Probe(ProbeStatus.DEAD, error_text(err))
    except Exception as err:  # noqa: BLE001 — the replica's own failure, or runtime_env setup
        return Probe(ProbeStatus.FAILED, error_text(err))
    # A proxy's ping answers its process id, a replica's health check its latest
    # handler error; other calls' answers mean nothing here.
    return Probe(ProbeStatus.OK, incarnation=answer if type(answer) is int else None,
                 handler_error=answer if isinstance(answer, HandlerError) else None)


def _proxy_outcome(future: Future) -> Probe:
    """A proxy call's outcome; its ready call's answer ("host:port") gives the port it listens on."""
    probe = _outcome(future)
    answer = future.result() if probe.status is ProbeStatus.OK else None
    if isinstance(answer, str):
        return replace(probe, port=int(answer.rsplit(":", 1)[1]))
    return probe


@dataclass
class _Call:
    future: Future
    started: float


@dataclass(frozen=True)
class _Waiting:
    """A replica's secret delivery waiting for the agent to send the values."""

    config: BackendConfig
    recipient: str
    submit: Callable[[bytes], Any]
    outer: Future


@dataclass
class _Proxy:
    handle: ActorHandle[Any] | None  # None: it could not even be submitted
    call: _Call  # the last ready or ping call


class RayAdapter:
    def __init__(self, namespace: str, otlp_endpoint: str | None = None) -> None:
        """`otlp_endpoint`: where the proxies and replicas it starts export their spans (None: off)."""
        self.namespace = namespace
        self._model_cache: tuple[str | None, int | None] = (None, None)
        self._otlp_endpoint = otlp_endpoint
        self._handles: dict[str, ActorHandle[Any]] = {}
        self._starts: dict[str, _Call] = {}
        # Starting replicas: a call that answers once Ray has the replica's process up (`came_up`).
        self._up: dict[str, _Call] = {}
        self._nodes: dict[str, str] = {}
        self._health: dict[str, _Call] = {}
        self._drains: dict[str, _Call] = {}
        # Replicas replaced as broken: the call reading their last output before the kill, the
        # latest `_LAST_WORDS_KEPT` kept (`gitops logs --previous`), by actor name.
        self._last_words: OrderedDict[str, _Call] = OrderedDict()
        # Starting replicas' model fetches: the call asking how far they are, and the last answer.
        self._staging: dict[str, tuple[_Call | None, tuple[ModelStaging, ...]]] = {}
        self._proxies: dict[str, _Proxy] = {}  # by proxy id (one per worker)
        self._cpus: dict[str, int] = {}
        self._totals: dict[str, dict[str, float]] = {}
        self._uploaded: dict[str, str] = {}
        self._dead_nodes: set[str] = set()
        self._backend_of: dict[str, str] = {}  # replica actor name -> its backend (for max_replicas_per_node)
        self._assigned: dict[str, str] = {}  # replica actor name -> the node it was sent to, before it says
        self._groups: dict[str, PlacementGroup] = {}  # replica actor name -> its placement group
        # The backends' secret values, sealed to each replica it starts (controller.state.secrets).
        self.secrets = SecretKeeper()
        # Replicas waiting for values the agent has not sent yet (after a controller
        # restart): sealed when they arrive, or failed by the start timeout.
        self._waiting: list[_Waiting] = []
        self._waiting_lock = threading.Lock()

    def use_model_cache(self, cache_dir: str | None, max_bytes: int | None) -> None:
        """Where each node's replicas cache models (`replica.models`), and its cap."""
        self._model_cache = (cache_dir, max_bytes)

    def use_secrets(self, keeper: SecretKeeper) -> None:
        self.secrets = keeper
        keeper.when_put(self._values_arrived)
    # --- Observer (read by backend_state.tick) ------------------------------

    def came_up(self, actor_name: str) -> bool:
        """Whether Ray has the starting replica's process up (or it failed on the way):
        its first call, a cheap one submitted before `initialize`, has answered."""
        up = self._up.get(actor_name)
        return up is None or up.future.done()

    def start_probe(self, actor_name: str) -> Probe:
        call = self._starts.get(actor_name)
        if call is None or not call.future.done():
            return _PENDING
        self._staging.pop(actor_name, None)  # started (or failed): nothing stages any more
        self._up.pop(actor_name, None)
        probe = _outcome(call.future)
        if probe.status == ProbeStatus.OK:
            self._nodes[actor_name] = call.future.result() or ""
        return probe

    def staging(self, actor_name: str) -> tuple[ModelStaging, ...]:
        """A starting replica's model fetches as it last said (`ReplicaAPI.staging`),
        asked again at most every `_STAGING_POLL_S`; a failed ask keeps the last answer."""
        call, latest = self._staging.get(actor_name, (None, ()))
        if call is not None:
            if not call.future.done():
                return latest
            try:
                latest = tuple(call.future.result())
            except Exception:  # noqa: BLE001 — a replica that failed or is gone: its start probe says so
                pass
            if time.monotonic() - call.started < _STAGING_POLL_S:
                self._staging[actor_name] = (call, latest)
                return latest
        handle = self._handles.get(actor_name)
        asked = _call(_replica(handle).call(ReplicaAPI.staging)) if handle is not None else None
        self._staging[actor_name] = (asked, latest)
        return latest

    def health_probe(self, actor_name: str) -> Probe | None:
        call = self._health.get(actor_name)
        if call is None:
            return None
        if not call.future.done():
            return _PENDING
        del self._health[actor_name]
        return _outcome(call.future)

    def drained(self, actor_name: str) -> bool:
        call = self._drains.get(actor_name)
        return call is None or call.future.done()

    def node_of(self, actor_name: str) -> str:
        return self._nodes.get(actor_name, "")

    def node_alive(self, node_id: str) -> bool:
        return node_id not in self._dead_nodes

    def refresh_nodes(self) -> dict[str, str]:
        """Read which nodes are alive (one GCS call); returns them, each with its IP."""
        nodes = ray.nodes()
        self._dead_nodes = {n["NodeID"] for n in nodes if not n.get("Alive")}
        self._cpus = {n["NodeID"]: int((n.get("Resources") or {}).get("CPU", 0)) for n in nodes if n.get("Alive")}
        self._totals = {n["NodeID"]: _plain_resources(n.get("Resources") or {}) for n in nodes if n.get("Alive")}
        return {n["NodeID"]: n.get("NodeManagerAddress", "") for n in sorted(nodes, key=lambda n: n["NodeID"])
                if n.get("Alive")}

    def node_cpus(self) -> dict[str, int]:
        """Each alive node's CPUs as Ray counts them, as of the last `refresh_nodes`."""
        return dict(self._cpus)

    def node_resources(self) -> dict[str, NodeResources]:
        """Each alive node's resources (as of the last `refresh_nodes`) and what is free of them now."""
        free = available_resources_per_node()
        return {node_id: NodeResources(total=total, available=_plain_resources(free.get(node_id, {})))
                for node_id, total in self._totals.items()}

    def cannot_fit(self, config: BackendConfig, count: int) -> str:
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        if config.max_replicas_per_node is not None:
            per_node = self._replicas_per_node(config.name)
            if spread_node(per_node, self._can_host(config), config.max_replicas_per_node) is None:
                return (f"every node that could take it runs max_replicas_per_node = "
                        f"{config.max_replicas_per_node} replicas of {config.name}")
        if config.placement is None:
            needs = actor_needs(config.ray_actor_options)
            if not needs:
                return ""
            available = available_resources_per_node()
            for node_id, free in available.items():
                if node_id in alive and all(free.get(k, 0.0) >= v * count for k, v in needs.items()):
                    return ""
            wanted = ", ".join(f"{k}={v:g}" for k, v in sorted(needs.items()))
            return f"no alive node has {wanted} available"
        free_nodes = [free for node_id, free in available_resources_per_node().items() if node_id in alive]
        return unplaceable(_bundles(config) * count, config.placement.strategy if count == 1 else
                           PlacementStrategy.PACK, free_nodes)

    def _can_host(self, config: BackendConfig) -> list[str]:
        """The alive nodes with room now for a replica's actor (its first bundle, with a [placement])."""
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        bundles = _bundles(config)
        first = bundles[0] if bundles else {}
        return sorted(node_id for node_id, free in available_resources_per_node().items()
                      if node_id in alive and all(free.get(k, 0.0) >= v for k, v in first.items()))

    def _replicas_per_node(self, backend: str) -> dict[str, int]:
        """The nodes this controller placed `backend`'s live replicas on, and how many on each."""
        counts: dict[str, int] = {}
        for actor_name, name in self._backend_of.items():
            node = self._nodes.get(actor_name) or self._assigned.get(actor_name, "")
            if name == backend and node:
                counts[node] = counts.get(node, 0) + 1
        return counts

    # --- reads for people -----------------------------------------------------

    async def replica_output(
        self, replicas: Sequence[tuple[str, str, OutputCursor | None]], since: float | None, timeout_s: float = 5.0,
    ) -> list[ReplicaOutput]:
        """Each replica's own output ((replica id, actor name, cursor) each), asked at once;
        a replica that cannot answer says why in `missing`."""

        async def one(replica_id: str, actor_name: str, cursor: OutputCursor | None) -> ReplicaOutput:
            handle = self._handles.get(actor_name)
            if handle is None:
                return ReplicaOutput(replica_id=replica_id, missing="not started by this controller yet")
            try:
                answer = await asyncio.wait_for(_replica(handle).call(ReplicaAPI.output, since, cursor), timeout_s)
            except Exception as err:  # noqa: BLE001 — a dead or busy replica has no output to give
                return ReplicaOutput(replica_id=replica_id, missing=error_text(err) or type(err).__name__)
            return answer

        return list(await asyncio.gather(*(one(*replica) for replica in replicas)))

    def last_words(self, actor_name: str) -> ReplicaOutput | None:
        """The output a replica replaced as broken had written, read just before it was
        killed; None when it was not read (its process was gone, or it did not answer)."""
        call = self._last_words.get(actor_name)
        if call is None or not call.future.done() or call.future.exception() is not None:
            return None
        answer = call.future.result()
        return answer if isinstance(answer, ReplicaOutput) else None

    # --- effects --------------------------------------------------------------

    def apply(self, effects: Sequence[Effect | ProxyEffect]) -> None:
        for effect in effects:
            try:
                self._apply_one(effect)
            except Exception:  # one bad effect must not stop the others
                logger.exception("controller effect %r failed", effect)

    def _apply_one(self, effect: Effect | ProxyEffect) -> None:
        if isinstance(effect, StartReplica):
            try:
                self._start(effect)
            except Exception as err:  # noqa: BLE001 — e.g. a working_dir that cannot be packaged
                failed: Future = Future()
                failed.set_exception(err)
                self._starts[effect.actor_name] = _Call(failed, time.monotonic())
        elif isinstance(effect, StopReplica):
            self._stop(effect)
        elif isinstance(effect, CheckHealth):
            handle = self._replica_handle(effect.actor_name)
            if handle is not None:
                self._health[effect.actor_name] = _call(_replica(handle).call(ReplicaAPI.check_health))
        elif isinstance(effect, Reconfigure):
            handle = self._replica_handle(effect.actor_name)
            if handle is not None:
                _replica(handle).call(ReplicaAPI.reconfigure, effect.user_config)
        elif isinstance(effect, DeliverSecrets):
            handle = self._replica_handle(effect.actor_name)
            if handle is not None:
                self._sealed(handle, effect.config, handle.update_secrets.remote)
        elif isinstance(effect, KillReplica):
            self._drains.pop(effect.actor_name, None)
            self._kill(effect.actor_name)
        elif isinstance(effect, StartProxy):
            self._start_proxy(effect)
        elif isinstance(effect, StopProxy):
            if effect.error:
                logger.warning("proxy %s failed: %s", effect.proxy_id, effect.error)
            self._kill_proxy(effect.proxy_id)
        elif isinstance(effect, PingProxy):
            proxy = self._proxies.get(effect.proxy_id)
            if proxy is not None and proxy.handle is not None:
                proxy.call = _call(_proxy(proxy.handle).call(ProxyAPI.ping))
        elif isinstance(effect, ProxyRestarted):
            logger.warning(
                "proxy %s restarted: process %d died, process %d serves (restart %d)",
                effect.proxy_id, effect.previous, effect.current, effect.restarts,
            )

    def _start(self, effect: StartReplica) -> None:
        """Get-or-create the named actor (in its placement group's first bundle,
        reserved first, when the backend has a [placement]), then (re)run its
        idempotent initialize."""
        config = effect.config
        self._backend_of[effect.actor_name] = config.name
        node = None
        if config.max_replicas_per_node is not None:
            node = spread_node(self._replicas_per_node(config.name), self._can_host(config),
                               config.max_replicas_per_node)
            if node is not None:
                self._assigned[effect.actor_name] = node
        options: dict[str, Any] = _actor_resources(config.ray_actor_options)
        if config.placement is not None:
            group = (self._groups.get(effect.actor_name) or _named_group(self._group_name(effect.actor_name))
                     or self._reserve(effect.actor_name, config, node))
            options.pop("accelerator_type", None)  # the group's GPU bundles ask for it
            options.setdefault("num_cpus", 0)  # else Ray asks the first bundle for 1 CPU to schedule it
            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                group, placement_group_bundle_index=0, placement_group_capture_child_tasks=True,
            )
        elif node is not None:
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
        cls = _replica_class().options(
            name=effect.actor_name,
            namespace=self.namespace,
            lifetime="detached",
            get_if_exists=True,
            max_restarts=0,
            max_concurrency=_REPLICA_CONCURRENCY,
            runtime_env=self._runtime_env(config),
            **options,
        )
        # The backend's config crosses as one value: what a replica needs of it, it reads there.
        handle = cls.remote(
            config, effect.replica_id,
            namespace=self.namespace, otlp_endpoint=self._otlp_endpoint, model_cache=self._model_cache,
        )
        self._handles[effect.actor_name] = handle
        # Answered at once by a constructed replica: submitted first, it tells when the process is up.
        self._up[effect.actor_name] = _call(_replica(handle).call(ReplicaAPI.staging))
        if config.secret_digests:
            self._starts[effect.actor_name] = self._sealed(handle, config, handle.initialize.remote)
        else:
            self._starts[effect.actor_name] = _call(handle.initialize.remote())

    def _reserve(self, actor_name: str, config: BackendConfig, node: str | None) -> PlacementGroup:
        """The replica's placement group, detached (it outlives a controller restart, as the
        replica does) and named as the replica; on `node` (its first bundle) when given."""
        assert config.placement is not None
        bundles = _bundles(config)
        selectors = [{NODE_ID_LABEL: node}] + [{} for _ in bundles[1:]] if node is not None else None
        group = placement_group(
            bundles, strategy=config.placement.strategy.value, name=self._group_name(actor_name), lifetime="detached",
            bundle_label_selector=selectors,
        )
        self._groups[actor_name] = group
        return group

    def _group_name(self, actor_name: str) -> str:
        """A replica's placement group's name: Ray's table of groups does not say their
        namespace, so the name does (a sweep must never take another namespace's)."""
        return f"{self.namespace}/{actor_name}"

    def _release(self, actor_name: str) -> None:
        """Remove the replica's placement group (it holds the GPUs the replica held)."""
        group = self._groups.pop(actor_name, None) or _named_group(self._group_name(actor_name))
        if group is not None:
            try:
                remove_placement_group(group)
            except Exception:  # noqa: BLE001 — already removed
                pass

    def _sealed(self, handle: ActorHandle[Any], config: BackendConfig, submit: Callable[[bytes], Any]) -> _Call:
        """`submit(sealed)` once the replica told its public key: the backend's
        secret values sealed to it, so Ray carries only what that replica can
        open. Never waits on the control loop: the replica's answer carries on,
        and values not held yet are waited for (`_values_arrived`)."""
        outer: Future = Future()

        def carry_on(asked: Future) -> None:
            try:
                recipient = asked.result()
            except Exception as err:  # noqa: BLE001 — the replica died: the start fails with it
                outer.set_exception(err)
                return
            self._seal_and_submit(_Waiting(config, recipient, submit, outer))

        handle.secrets_recipient.remote().future().add_done_callback(carry_on)
        return _Call(outer, time.monotonic())

    def _seal_and_submit(self, waiting: _Waiting) -> None:
        if waiting.outer.done():  # failed meanwhile (the start timed out, the replica stopped)
            return
        with self._waiting_lock:
            if not self.secrets.can_seal(waiting.config):
                self._waiting.append(waiting)
                return
            sealed = self.secrets.seal_for(waiting.config, waiting.recipient)
        try:
            ref = waiting.submit(sealed)
        except Exception as err:  # noqa: BLE001 — the start fails with it (names no value)
            waiting.outer.set_exception(err)
            return
        ref.future().add_done_callback(lambda done: _settle(waiting.outer, done))

    def _values_arrived(self, backends: list[str]) -> None:
        with self._waiting_lock:
            ready = [w for w in self._waiting if w.config.name in backends]
            self._waiting = [w for w in self._waiting if w.config.name not in backends and not w.outer.done()]
        for waiting in ready:
            self._seal_and_submit(waiting)

    def _runtime_env(self, config: BackendConfig) -> dict[str, Any]:
        """The backend's runtime_env with its working_dir uploaded to the GCS.

        Ray accepts local directories only at job level, so the controller
        packages the exported commit itself; exports are immutable, so the
        URI is cached per directory.
        """
        env = dict(config.runtime_env)
        working_dir = config.working_dir or env.get("working_dir")
        if not working_dir:
            return env
        uri = self._uploaded.get(working_dir)
        if uri is None:
            uri = self._uploaded[working_dir] = upload_working_dir(working_dir, logger)
        env["working_dir"] = uri
        return env

    def _stop(self, effect: StopReplica) -> None:
        self._starts.pop(effect.actor_name, None)
        self._up.pop(effect.actor_name, None)
        self._staging.pop(effect.actor_name, None)
        self._health.pop(effect.actor_name, None)
        handle = self._replica_handle(effect.actor_name)
        if handle is None:
            self._release(effect.actor_name)  # its process is gone: its group must not outlive it
            return
        if effect.graceful_timeout_s <= 0 and effect.failed:
            # Killed once its last output is read (or the state machine's grace ran out): the
            # output a crashing or hung replica wrote goes with it otherwise.
            reading = _call(_replica(handle).call(ReplicaAPI.output, None, None))
            self._drains[effect.actor_name] = self._last_words[effect.actor_name] = reading
            while len(self._last_words) > _LAST_WORDS_KEPT:
                self._last_words.popitem(last=False)
            return
        if effect.graceful_timeout_s <= 0:
            self._kill(effect.actor_name)
            return
        self._drains[effect.actor_name] = _call(
            _replica(handle).call(ReplicaAPI.prepare_for_shutdown, effect.graceful_timeout_s)
        )

    def _kill(self, actor_name: str) -> None:
        handle = self._handles.pop(actor_name, None) or self._find(actor_name)
        self._nodes.pop(actor_name, None)
        self._assigned.pop(actor_name, None)
        self._backend_of.pop(actor_name, None)
        if handle is not None:
            try:
                ray.kill(handle, no_restart=True)
            except Exception:  # noqa: BLE001 — already gone
                pass
        if actor_name.startswith(REPLICA_PREFIX):
            self._release(actor_name)

    # --- finding actors --------------------------------------------------------

    def _find(self, actor_name: str) -> ActorHandle[Any] | None:
        try:
            return ray.get_actor(actor_name, namespace=self.namespace)
        except ValueError:
            return None

    def _replica_handle(self, actor_name: str) -> ActorHandle[Any] | None:
        handle = self._handles.get(actor_name)
        if handle is None:
            handle = self._find(actor_name)
            if handle is not None:
                self._handles[actor_name] = handle
        return handle

    def handle(self, actor_name: str) -> ActorHandle[Any] | None:
        return self._replica_handle(actor_name)

    def adopt(self, actor_names: set[str]) -> set[str]:
        """The replicas of a checkpoint still alive after a controller restart."""
        found = set()
        for name in actor_names:
            if self._replica_handle(name) is not None:
                found.add(name)
        return found

    def sweep_leaks(self, known: set[str]) -> list[str]:
        """Kill replica actors of this namespace that no checkpoint knows about."""
        leaked = [
            name for name in _named_actors(self.namespace)
            if name.startswith(REPLICA_PREFIX) and name not in known
        ]
        for name in leaked:
            self._kill(name)
        own = f"{self.namespace}/"
        for group_name in _group_names():
            actor_name = group_name[len(own):]
            if group_name.startswith(own + REPLICA_PREFIX) and actor_name not in known:
                self._release(actor_name)
        return leaked

    # --- proxies --------------------------------------------------------------

    def proxy_probes(self) -> dict[str, Probe]:
        """Per proxy id, the outcome of its worker's last ready or ping call, once finished."""
        return {
            key: _proxy_outcome(proxy.call.future)
            for key, proxy in self._proxies.items() if proxy.call.future.done()
        }

    def _start_proxy(self, effect: StartProxy) -> None:
        """Start one proxy worker; a failure to even submit it becomes its probe."""
        try:
            self._proxies[effect.proxy_id] = self._submit_proxy(effect)
        except Exception as err:  # noqa: BLE001 — e.g. the proxy class cannot be imported
            failed: Future = Future()
            failed.set_exception(err)
            self._proxies[effect.proxy_id] = _Proxy(None, _Call(failed, time.monotonic()))

    def _submit_proxy(self, effect: StartProxy) -> _Proxy:
        spec, node_id = effect.spec, effect.node_id
        proxy_class = _load_class(spec.proxy_class)
        cls = _remote_class(proxy_class).options(
            name=effect.actor_name,
            namespace=self.namespace,
            lifetime="detached",
            get_if_exists=True,
            # A proxy process that dies is restarted in place by Ray at once
            # (its constructor binds the same port, shared with the node's
            # other workers by SO_REUSEPORT, and long-polls its routes),
            # well before the fleet's next ping would notice; the ping in
            # flight waits for the restart. Past this budget the fleet
            # replaces the actor, with backoff.
            max_restarts=_PROXY_RESTARTS_IN_PLACE,
            max_task_retries=-1,
            num_cpus=0,
            max_concurrency=_REPLICA_CONCURRENCY,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        )
        handle = cls.remote(
            spec.controller_name, self.namespace, node_id, spec.listen_host(effect.node_ip), spec.port,
            metrics_port=spec.metrics_port, worker=effect.worker, shared_dir=self._shared_dir(node_id),
            model_cache_dir=self._model_cache[0], otlp_endpoint=self._otlp_endpoint,
            max_connections=spec.max_connections, grpc_port=spec.grpc_port,
        )
        return _Proxy(handle, _call(_proxy(handle).call(ProxyAPI.ready)))

    def _shared_dir(self, node_id: str) -> str:
        """Where the node's proxy workers of this namespace share their metrics (and what names their group).

        In this Ray session's directory, so a new session starts from no files
        (see proxy.observability.metrics). Ray gives every node the head's temp dir, so the
        path is the same on the proxy's node as here."""
        return os.path.join(session_dir(), f"gitops-proxy-metrics-{self.namespace}-{node_id}")

    def _kill_proxy(self, key: str) -> None:
        proxy = self._proxies.pop(key, None)
        if proxy is not None and proxy.handle is not None:
            try:
                ray.kill(proxy.handle, no_restart=True)
            except Exception:  # noqa: BLE001 — already gone
                pass

    def begin_proxy_shutdown(self) -> list[Awaitable[None]]:
        """Ask every proxy to stop serving; returns the calls to wait for."""
        return [_proxy(p.handle).call(ProxyAPI.shutdown) for p in self._proxies.values() if p.handle is not None]

    def begin_replica_drain(self, timeout_s: float) -> list[Awaitable[None]]:
        """Ask every known replica to finish in-flight requests."""
        return [_replica(h).call(ReplicaAPI.prepare_for_shutdown, timeout_s) for h in self._handles.values()]

    def stop_everything(self, replica_names: set[str]) -> None:
        """Shutdown: kill every proxy and replica of this namespace."""
        for key in list(self._proxies):
            self._kill_proxy(key)
        for name in _named_actors(self.namespace):
            if name.startswith(PROXY_PREFIX) or name.startswith(REPLICA_PREFIX):
                self._kill(name)
        for name in replica_names:
            self._kill(name)


_ACTOR_CLASSES: dict[Any, Any] = {}


def _remote_class(cls: Any) -> Any:
    # One ActorClass per class: each ray.remote() would export the class again.
    if cls not in _ACTOR_CLASSES:
        _ACTOR_CLASSES[cls] = ray.remote(cls)
    return _ACTOR_CLASSES[cls]


def _replica_class() -> Any:
    return _remote_class(_load_class(REPLICA_CLASS))


def _replica(handle: ActorHandle[Any]) -> Remote[ReplicaAPI]:
    return Remote(handle)


def _proxy(handle: ActorHandle[Any]) -> Remote[ProxyAPI]:
    return Remote(handle)


# As many as the controller keeps of replaced replicas (`controller.loop`, its failures).
_LAST_WORDS_KEPT = 100


def _call(ref: Awaitable[Any]) -> _Call:
    # What `Remote.call` returns is Ray's ObjectRef, which has `future()`.
    return _Call(cast("ObjectRef[Any]", ref).future(), time.monotonic())


def _settle(outer: Future, done: Future) -> None:
    error = done.exception()
    if error is not None:
        outer.set_exception(error)
    else:
        outer.set_result(done.result())


def _named_actors(namespace: str) -> list[str]:
    names = []
    for item in ray.util.list_named_actors(all_namespaces=True):
        if isinstance(item, dict):
            if item.get("namespace") == namespace:
                names.append(item["name"])
    return names



NODE_ID_LABEL = "ray.io/node-id"  # the label every Ray node carries: its id
ACCELERATOR_PREFIX = "accelerator_type:"  # the resource a node started with an accelerator type offers


def _plain_resources(resources: dict[str, Any]) -> dict[str, float]:
    """A node's resources without Ray's markers (`node:IP`, `node:__internal_head__`) and the object store."""
    return {k: float(v) for k, v in resources.items()
            if not k.startswith("node:") and k != "object_store_memory"}


def _bundles(config: BackendConfig) -> list[dict[str, float]]:
    """The replica's placement bundles as Ray takes them: each GPU bundle asks for the
    backend's accelerator_type, as an actor's own accelerator_type would."""
    bundles = replica_bundles(config.placement, config.ray_actor_options)
    accelerator = config.ray_actor_options.get("accelerator_type")
    if accelerator:
        bundles = [{**b, f"{ACCELERATOR_PREFIX}{accelerator}": 0.001} if b.get("GPU") else b for b in bundles]
    return bundles


def _group_names() -> list[str]:
    """The names of the cluster's placement groups that are not removed."""
    return [group["name"] for group in placement_group_table().values()
            if group.get("state") != "REMOVED" and group.get("name")]


def _named_group(name: str) -> PlacementGroup | None:
    try:
        return ray.util.get_placement_group(name)
    except ValueError:
        return None


def _load_class(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def _actor_resources(options: dict[str, Any]) -> dict[str, Any]:
    allowed = ("num_cpus", "num_gpus", "memory", "resources", "accelerator_type")
    return {k: v for k, v in options.items() if k in allowed}
