"""The controller actor: a thin RPC façade over the state modules and the loop.

Owns the control loop (one tick: observe and decide in `BackendState` and
`ProxyFleet`, checkpoint, apply their effects through a `ClusterAdapter`,
publish long-poll keys, judge goals), recovery from the checkpoint at start,
and the Ray-facing methods of `vocabulary.goal_api.GoalAPI` plus
`listen_for_change`, load reports and status. Every state change is
checkpointed before any actor is started or stopped. The loop catches, logs
and counts every error and never dies.

Runs as one detached, named Ray actor (see `controller.client`); it holds no
state that the checkpoint and a look at live actors cannot rebuild. Ray
itself is reached only through the adapter and storage, which default to
`controller.shell.ray_adapter` and `controller.persistence.ray_kv`, imported when first built,
so this module loads without Ray (tests pass `controller.testing` fakes).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import Counter, deque
from dataclasses import dataclass, field, fields
from typing import Any, Awaitable, Callable, Protocol, Sequence
from urllib.parse import urlsplit

from vocabulary.goal_api import CONTROLLER_NAME, PROXY_CLASS, LongPollKey
from controller.shell import malloc_arenas
from controller.policies.autoscaling import Autoscaler
from controller.state.backend_state import BackendOptions, BackendState, Effect, Observer, Probe
from controller.persistence.checkpoint import Storage, decode, encode
from controller.state.ownership import claim
from vocabulary.ownership import Owner
from vocabulary.proxy_workers import DEFAULT_MAX_CONNECTIONS
from vocabulary.configs import (
    BackendConfig,
    EndpointConfig,
    GoalResult,
    ReplicaInfo,
    ReplicaSet,
    ServingState,
)
from controller.state.endpoint_state import EndpointState, check_backend_deletable
from controller.policies.recent_requests import WINDOW_S, RecentRequests
from controller.policies.request_totals import RequestTotals
from vocabulary.request_stats import RequestStats
from vocabulary.replica_output import OutputCursor, ReplicaOutput
from controller.state.rollout_state import RolloutState
from controller.state.secrets import SecretKeeper
from controller.state.goals import GoalKind, GoalTable
from controller.state.judging import fingerprint, judge
from controller.state.longpoll import ANONYMOUS, LongPollHost
from controller.state.proxy_fleet import ProxyEffect, ProxyFleet, ProxySpec, StopProxy
from vocabulary.rollouts import MetricQuery, MetricReading
from vocabulary.status import BackendStatus, ClusterStatus, EndpointStatus, GoalTiming, ReplicaFailure

__all__ = ["ControllerActor", "ControllerOptions", "ClusterAdapter"]

logger = logging.getLogger(__name__)

_TRIM_EVERY_S = 10.0  # the C heap's free pages go back to the kernel this often (controller.shell.malloc_arenas)


@dataclass(frozen=True)
class ControllerOptions:
    """Tunables, passed as a plain dict so they survive actor restarts."""

    tick_s: float = 0.1
    proxy_class: str | None = PROXY_CLASS
    proxy_host: str = "127.0.0.1"
    proxy_port: int = 8000
    # Each node's proxies serve their Prometheus metrics on this port of the node (None: off).
    proxy_metrics_port: int | None = None
    # Proxy workers per node, sharing the proxy port (SO_REUSEPORT); 0: the
    # node's CPUs, at most vocabulary.proxy_workers.DEFAULT_WORKERS_CAP.
    proxy_workers: int = 1
    # Open connections each proxy worker takes; past it, 503 with Retry-After.
    proxy_max_connections: int = DEFAULT_MAX_CONNECTIONS
    # Where rollouts' PromQL checks are asked until a checkpoint or the agent
    # (`set_prometheus_url`, its --prometheus-url) says otherwise; None: nowhere.
    prometheus_url: str | None = None
    prometheus_timeout_s: float = 5.0
    # Where proxies and replicas export their spans (OTLP/HTTP, `http://HOST:4318`); None: no tracing.
    otlp_endpoint: str | None = None
    proxy_check_s: float = 1.0
    longpoll_timeout_s: float = 30.0
    # Each node's model cache (`replica.models`): its directory (None: a node-local
    # temporary one) and its cap in bytes (None: no cap).
    model_cache_dir: str | None = None
    model_cache_bytes: int | None = None
    # Replica start-up, failure and backoff tunables; given flat in the dict.
    backend: BackendOptions = field(default_factory=BackendOptions)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ControllerOptions:
        """Options from one flat dict: this class's fields and `BackendOptions`'."""
        own = {f.name for f in fields(cls)} - {"backend"}
        backend = {f.name for f in fields(BackendOptions)}
        data = dict(data or {})
        unknown = sorted(set(data) - own - backend)
        if unknown:
            raise ValueError(f"unknown controller option(s): {', '.join(unknown)}")
        backend_options = BackendOptions(**{k: data.pop(k) for k in backend & set(data)})
        return cls(**data, backend=backend_options)


class ClusterAdapter(Observer, Protocol):
    """What the controller needs of the cluster: the replica state machine's
    probes and node facts, the proxies' probes, and effects carried out."""

    def refresh_nodes(self) -> dict[str, str]:
        """Read which nodes are alive; returns them, each with its IP."""

    def proxy_probes(self) -> dict[str, Probe]:
        """Per proxy id, the outcome of its worker's last ready or ping call, once finished."""

    def node_cpus(self) -> dict[str, int]:
        """Each alive node's CPUs, as of the last `refresh_nodes`."""

    def apply(self, effects: Sequence[Effect | ProxyEffect]) -> None: ...

    def adopt(self, actor_names: set[str]) -> set[str]:
        """The replicas of a checkpoint still alive after a controller restart."""

    def sweep_leaks(self, known: set[str]) -> list[str]:
        """Kill replica actors no checkpoint knows about; returns their names."""

    def handle(self, actor_name: str) -> object: ...

    def begin_proxy_shutdown(self) -> list[Awaitable[None]]: ...

    def begin_replica_drain(self, timeout_s: float) -> list[Awaitable[None]]: ...

    def stop_everything(self, replica_names: set[str]) -> None: ...

    async def replica_output(
        self, replicas: Sequence[tuple[str, str, OutputCursor | None]], since: float | None,
    ) -> list[ReplicaOutput]:
        """Each replica's own output ((replica id, actor name, cursor) each), for `gitops logs`."""


# Asks rollouts' PromQL checks of the Prometheus at a base URL (None: none):
# each query with its reading (see controller.shell.prometheus).
Asker = Callable[[str | None, tuple[MetricQuery, ...]], Awaitable[list[tuple[MetricQuery, MetricReading]]]]


def _prometheus_asker(options: ControllerOptions) -> Asker:
    from controller.shell.prometheus import asker

    return asker(options.prometheus_timeout_s)


def _ray_storage(namespace: str) -> Storage:
    from controller.persistence.ray_kv import RayKVStorage

    return RayKVStorage(namespace)


def _ray_adapter(namespace: str, secrets: SecretKeeper, options: ControllerOptions) -> ClusterAdapter:
    from controller.shell.ray_adapter import RayAdapter

    adapter = RayAdapter(namespace, options.otlp_endpoint)
    adapter.use_secrets(secrets)
    adapter.use_model_cache(options.model_cache_dir, options.model_cache_bytes)
    return adapter


class ControllerActor:
    def __init__(self, namespace: str, options: dict[str, Any] | None = None,
                 controller_name: str = CONTROLLER_NAME, *,
                 storage: Storage | None = None, adapter: ClusterAdapter | None = None,
                 asker: Asker | None = None) -> None:
        """`storage`, `adapter` and `asker` default to Ray's KV, Ray and
        Prometheus over HTTP (built when first needed); tests pass fakes."""
        self._namespace = namespace
        self._name = controller_name
        self._options = ControllerOptions.from_dict(options)
        self._prometheus_url = self._options.prometheus_url  # the checkpoint's wins (`_recover`)
        self._storage: Storage = storage or _ray_storage(namespace)
        self._secrets = SecretKeeper()  # in memory only: never in the checkpoint (controller.state.secrets)
        self._adapter: ClusterAdapter = adapter or _ray_adapter(namespace, self._secrets, self._options)
        self._proxies = ProxyFleet(self._proxy_spec())
        self._longpoll = LongPollHost()
        self._errors: Counter = Counter()
        self._loads: dict[str, dict[str, tuple[int, int]]] = {}
        self._autoscaler = Autoscaler()
        self._kill_at: str | None = None
        self._ticked = asyncio.Event()
        self._stopping = False
        self._ticks = 0
        self._next_proxy_check = 0.0
        self._proxy_nodes = 1  # alive nodes running proxies: each enforces 1/this of every [limits]
        self._published_endpoints: set[str] = set()
        self._published_backends: set[str] = set()
        self._saved: dict[str, Any] | None = None
        self._owner: Owner | None = None
        self._restarts = 0  # starts that found a checkpoint, this one included
        self._failures: deque[ReplicaFailure] = deque(maxlen=100)  # shown in status, for the agent's log
        self._recent = RecentRequests()  # each backend's requests in the last minute, for status
        self._serving_versions: dict[str, str] = {}  # backend -> the version all its replicas ran at the last look
        self._endpoint_totals = RequestTotals()  # each endpoint's, summed over proxies (not checkpointed)
        self._recent_endpoints = RecentRequests()  # each endpoint's requests in the last minute, for status
        self._recover()
        self._publish_endpoints()
        # Know the proxies before the first call, so no goal is judged against none.
        self._check_proxies(time.monotonic())
        self._asker = asker
        self._analysis: asyncio.Future[None] | None = None
        self._loop_task = asyncio.get_event_loop().create_task(self._run())

    # --- recovery and checkpoints -------------------------------------------

    def _recover(self) -> None:
        data = self._storage.get()
        options = self._options.backend
        if data is None:
            self._backends = BackendState(options)
            self._endpoints = EndpointState()
            self._goals = GoalTable()
            self._rollouts = RolloutState()
            return
        body = decode(data)
        self._restarts = int(body.get("restarts", 0)) + 1
        self._prometheus_url = body.get("prometheus_url", self._prometheus_url)
        self._owner = Owner.from_json(body["owner"]) if body.get("owner") else None
        self._backends = BackendState.from_json(body["backends"], options)
        self._endpoints = EndpointState.from_json(body["endpoints"])
        self._goals = GoalTable.from_json(body["goals"])
        self._rollouts = RolloutState.from_json(body.get("rollouts"))
        found = self._adapter.adopt(self._backends.all_actor_names())
        effects = self._backends.recover(time.monotonic(), found)
        logger.warning(
            "controller restarted (restart %d): recovered %d backends, %d endpoints from its checkpoint; "
            "%d replica actors found alive", self._restarts, len(self._backends.names()), len(self._endpoints.all()),
            len(found),
        )
        self._log_failures()
        self._save()
        self._adapter.apply(effects)
        leaked = self._adapter.sweep_leaks(self._backends.all_actor_names())
        if leaked:
            logger.warning("killed %d replica actors unknown to the checkpoint", len(leaked))

    def _save(self) -> None:
        body = {
            "backends": self._backends.to_json(),
            "endpoints": self._endpoints.to_json(),
            "goals": self._goals.to_json(),
            "owner": self._owner.to_json() if self._owner else None,
            "rollouts": self._rollouts.to_json(),
            "restarts": self._restarts,
            "prometheus_url": self._prometheus_url,
        }
        self._backends.dirty = False
        self._rollouts.dirty = False
        if body == self._saved:
            # An idempotent repeat changed nothing: no write.
            return
        self._storage.put(encode(body))
        self._saved = body

    def _maybe_die(self, point: str) -> None:
        if self._kill_at == point:
            logger.warning("kill switch at %s", point)
            os._exit(1)

    # --- the control loop ----------------------------------------------------

    async def _run(self) -> None:
        trimmed = time.monotonic()
        while not self._stopping:
            try:
                self._tick()
                self._analyse()
            except Exception:  # never die: count, log, try again next tick
                self._errors["tick"] += 1
                logger.exception("controller tick failed")
            if time.monotonic() - trimmed >= _TRIM_EVERY_S:
                await asyncio.to_thread(malloc_arenas.trim)  # 10-40 ms on a fragmented heap: off the loop
                trimmed = time.monotonic()
            await asyncio.sleep(self._options.tick_s)

    def _note_new_versions(self, now: float) -> None:
        """A backend whose replicas all came to run a new version is counted afresh for status,
        from the totals as they stand (called at the end of every tick, in the one that saw the
        change: a goal met is never reported before it, so an answer after `Synced` counts)."""
        seen, self._serving_versions = self._serving_versions, {}
        for name in self._backends.names():
            version = self._backends.serving_version(name) or seen.get(name)
            if version is None:
                continue
            self._serving_versions[name] = version
            if seen.get(name) not in (None, version):
                self._recent.new_version(name, self._rollouts.totals(), now)

    def _tick(self) -> None:
        now = time.monotonic()
        self._ticks += 1
        self._check_proxies(now)
        self._autoscale(now)
        if self._recent.due(now):
            for erring in self._recent.sample(self._rollouts.totals(), now):
                self._backends.check_soon(erring)  # their health checks answer the latest exception
        self._recent_endpoints.sample(self._endpoint_totals.totals, now)
        effects = self._backends.tick(now, self._adapter)
        self._log_failures()
        if self._backends.dirty:
            self._save()
        self._maybe_die("after_checkpoint")
        # Proxies learn a replica is leaving before it starts to drain.
        self._publish_replicas()
        self._apply(effects)
        self._maybe_die("after_effects")
        self._step_rollouts()
        self._judge_goals()
        self._note_new_versions(now)

    def _log_failures(self) -> None:
        for failure in self._backends.take_failures():
            logger.warning("%s", failure.message())
            self._failures.append(failure)

    def _step_rollouts(self) -> None:
        """Advance every rollout; checkpoint a step before proxies are told of it."""
        moved = self._rollouts.tick(time.time())
        if self._rollouts.dirty:
            self._save()
        for name in moved:
            self._publish_endpoint(name)

    def _analyse(self) -> None:
        """Ask Prometheus the rollouts' due PromQL checks, one batch at a time, beside the loop."""
        if self._analysis is not None and not self._analysis.done():
            return
        due = self._rollouts.due_queries(time.time())
        if due:
            self._analysis = asyncio.ensure_future(self._ask(due))

    async def _ask(self, due: tuple[MetricQuery, ...]) -> None:
        try:
            if self._asker is None:
                self._asker = _prometheus_asker(self._options)
            answers = await self._asker(self._prometheus_url, due)
        except Exception:
            self._errors["analysis"] += 1
            logger.exception("asking Prometheus failed")
            return
        for query, reading in answers:
            if reading.error is not None:
                logger.warning("rollout %s: metric check %s for %s: %s",
                               query.endpoint, query.check, query.backend, reading.error)
            self._rollouts.record_readings(query.endpoint, [reading])

    def _judge_goals(self) -> None:
        if self._goals.evaluate(self._judge, time.time()):
            self._save()
        self._ticked.set()
        self._ticked = asyncio.Event()

    def _autoscale(self, now: float) -> None:
        """Turn the target-replicas knob of autoscaled backends (policy: controller.policies.autoscaling)."""
        autoscaled = {
            name: (self._backends.target(name), config.autoscaling)
            for name, config in self._backends.configs().items()
            if config.autoscaling is not None
        }
        running = {name: len(self._backends.running(name)) for name in autoscaled}
        for decision in self._autoscaler.tick(autoscaled, now, running).values():
            if decision.changed:
                logger.info("autoscaling %s: %d -> %d replicas, %s", decision.backend,
                            decision.current, decision.desired, decision.reason)
                self._backends.set_target(decision.backend, decision.desired)

    def _apply(self, effects: list[Effect]) -> None:
        if effects:
            self._adapter.apply(effects)

    def _proxy_spec(self) -> ProxySpec | None:
        opts = self._options
        if opts.proxy_class is None:
            return None
        return ProxySpec(opts.proxy_class, self._name, opts.proxy_host, opts.proxy_port,
                         opts.proxy_metrics_port, opts.proxy_workers, opts.proxy_max_connections)

    def _check_proxies(self, now: float) -> None:
        """Refresh node facts and keep each alive node's proxy workers; a stopped worker's acks are
        forgotten, and so is the load of one that is gone for good (its node left, or fewer workers)."""
        if now < self._next_proxy_check:
            return
        self._next_proxy_check = now + self._options.proxy_check_s
        try:
            alive = self._adapter.refresh_nodes()
            effects = self._proxies.tick(now, alive, self._adapter.proxy_probes(), self._adapter.node_cpus())
            self._adapter.apply(effects)
        except Exception:
            self._errors["proxies"] += 1
            logger.exception("proxy reconciliation failed")
            return
        nodes = max(1, len(alive)) if self._proxies.spec is not None else 1
        if nodes != self._proxy_nodes:  # every node's proxies now enforce their new share of each limit
            self._proxy_nodes = nodes
            self._publish_routes()
        for effect in effects:
            if isinstance(effect, StopProxy):
                self._longpoll.forget(effect.proxy_id)
                if not effect.error:
                    self._loads.pop(effect.proxy_id, None)

    def _judge(self, goal: Any) -> Any:
        return judge(goal, self._backends, self._endpoints, self._longpoll,
                     self._proxies.live(), self._proxies.serving())

    # --- long-poll publishing ------------------------------------------------

    def _publish_replicas(self) -> None:
        names = set(self._backends.names())
        for name in names:
            running = self._backends.running(name)
            config = self._backends.config(name)
            mcq = config.max_concurrent_queries if config else 1
            batching = config.batching if config else None
            cold_start_s = config.cold_start_timeout_s if config else None
            commit = config.commit if config else None
            routing = config.routing if config else None
            multiplex = config.multiplex if config else None
            key = (mcq, batching, cold_start_s, commit, routing, multiplex, tuple(r.replica_id for r in running))
            if self._longpoll.fingerprint(LongPollKey.replicas(name)) == key:
                continue
            infos = tuple(
                ReplicaInfo(replica_id=r.replica_id, actor_name=r.actor_name,
                            handle=self._adapter.handle(r.actor_name))
                for r in running
            )
            payload = ReplicaSet(
                backend=name, max_concurrent_queries=mcq, replicas=infos,
                batching=batching, cold_start_timeout_s=cold_start_s, commit=commit, routing=routing,
                multiplex=multiplex,
            )
            self._longpoll.publish(LongPollKey.replicas(name), payload, key)
        for name in self._published_backends - names:
            self._longpoll.publish(LongPollKey.replicas(name), None, None)
        self._published_backends = names

    def _publish_endpoints(self) -> None:
        """Routes and every endpoint key; unchanged ones cost nothing."""
        self._publish_routes()
        current = self._endpoints.all()
        for name, config in current.items():
            served = self._rollouts.served(config)
            self._longpoll.publish(LongPollKey.endpoint(name), served, served)
        for name in self._published_endpoints - set(current):
            self._longpoll.publish(LongPollKey.endpoint(name), None, None)
        self._published_endpoints = set(current)

    def _publish_routes(self) -> None:
        table = self._endpoints.route_table(self._proxy_nodes)
        self._longpoll.publish(LongPollKey.ROUTES, table, table)

    def _publish_endpoint(self, name: str) -> None:
        config = self._endpoints.get(name)
        served = None if config is None else self._rollouts.served(config)
        self._publish_routes()
        self._longpoll.publish(LongPollKey.endpoint(name), served, served)
        if config is None:
            self._published_endpoints.discard(name)
        else:
            self._published_endpoints.add(name)

    # --- the owning agent ------------------------------------------------------------

    async def claim(self, owner: dict[str, Any], take_over: bool) -> dict[str, Any] | None:
        """Record `owner` as this controller's agent; the other owner's record if refused."""
        candidate = Owner.from_json(owner)
        holder = claim(self._owner, candidate, take_over)
        if holder is not None:
            return holder.to_json()
        if self._owner is not None and self._owner.agent_id != candidate.agent_id:
            logger.warning("agent %s took over from %s", candidate.agent_id, self._owner.agent_id)
        self._owner = candidate
        self._save()
        return None

    async def owner(self) -> dict[str, Any] | None:
        return self._owner.to_json() if self._owner else None

    async def release(self, agent_id: str) -> None:
        """Forget the owner if it is still `agent_id` (its agent stopped cleanly)."""
        if self._owner is not None and self._owner.agent_id == agent_id:
            self._owner = None
            self._save()

    async def set_prometheus_url(self, url: str | None) -> None:
        """The agent's --prometheus-url, given at each of its starts: it reaches a
        controller already running, and is checkpointed so a restart keeps it."""
        if url == self._prometheus_url:
            return
        # Its host and port only: a URL may hold credentials.
        where = f"Prometheus at {urlsplit(url).netloc.rpartition('@')[2]}" if url else "no Prometheus"
        logger.info("rollouts' metric checks now ask %s", where)
        self._prometheus_url = url
        self._save()

    # --- GoalAPI ------------------------------------------------------------------

    async def apply_backend(self, config: BackendConfig) -> str:
        config = BackendConfig.model_validate(config)
        effects = self._backends.apply(config)
        goal_id = self._goals.request(GoalKind.BACKEND_READY, config.name,
                                      fingerprint(config), time.time(), self._judge)
        self._save()
        self._maybe_die("after_api_checkpoint")
        self._apply(effects)
        return goal_id

    async def delete_backend(self, name: str) -> str:
        check_backend_deletable(name, self._endpoints)
        self._backends.delete(name)
        goal_id = self._goals.request(GoalKind.BACKEND_DELETED, name, "", time.time(), self._judge)
        self._save()
        return goal_id

    async def apply_endpoint(self, config: EndpointConfig) -> str:
        config = EndpointConfig.model_validate(config)
        current = self._endpoints.get(config.name)
        live = None if current is None else self._rollouts.served(current).traffic
        self._endpoints.apply(config, self._backends.configs())
        self._rollouts.on_endpoint(config, live, time.time())
        goal_id = self._goals.request(GoalKind.ENDPOINT_ACKED, config.name,
                                      fingerprint(config), time.time(), self._judge)
        self._save()
        self._publish_endpoint(config.name)
        return goal_id

    async def delete_endpoint(self, name: str) -> str:
        self._endpoints.delete(name)
        self._rollouts.forget(name)
        goal_id = self._goals.request(GoalKind.ENDPOINT_DELETED, name, "", time.time(), self._judge)
        self._save()
        self._publish_endpoint(name)
        return goal_id

    async def wait_for_goal(self, goal_id: str, timeout_s: float) -> GoalResult:
        deadline = time.monotonic() + timeout_s
        while True:
            result = self._goals.result(goal_id)
            if result is None:
                raise ValueError(f"unknown goal {goal_id!r} (never issued, or long forgotten)")
            remaining = deadline - time.monotonic()
            if result.state.value != "pending" or remaining <= 0:
                return result
            try:
                await asyncio.wait_for(self._ticked.wait(), timeout=min(remaining, 1.0))
            except TimeoutError:
                pass

    async def get_state(self) -> ServingState:
        return ServingState(backends=self._backends.configs(), endpoints=self._endpoints.all())

    async def get_status(self) -> ClusterStatus:
        now = time.monotonic()
        window_s, serving = self._recent.last_minute(self._rollouts.totals(), now)
        _, endpoint_serving = self._recent_endpoints.last_minute(self._endpoint_totals.totals, now)
        return ClusterStatus(
            backends={
                n: _recent_error_only(self._backends.status(n), time.time()).model_copy(
                    update={"scaling_decisions": self._autoscaler.decisions(n)})
                for n in self._backends.names()
            },
            endpoints=self._endpoint_status(),
            proxies=self._proxies.proxy_status(),
            goals_pending=len(self._goals.pending()),
            goal_durations=tuple(GoalTiming.model_validate(d) for d in self._goals.durations()[-100:]),
            errors=dict(self._errors),
            ticks=self._ticks,
            controller_restarts=self._restarts,
            replica_failures=tuple(self._failures),
            load={p: dict(loads) for p, loads in self._loads.items()},
            rollouts=self._rollouts.rollouts(),
            rollout_checks=self._rollouts.check_counts(),
            serving=serving,
            serving_window_s=window_s,
            serving_windows=self._recent.shorter_windows(now),
            endpoint_serving=endpoint_serving,
        )

    def _endpoint_status(self) -> dict[str, EndpointStatus]:
        """Each endpoint as the proxies serve it: during a rollout, at its current step's weights."""
        configs = self._endpoints.all()
        return {
            name: status.model_copy(update={"traffic": self._rollouts.served(configs[name]).traffic})
            for name, status in self._endpoints.status().items()
        }

    # --- proxies, load and autoscaling -------------------------------------------

    async def listen_for_change(
        self, keys_to_snapshot_ids: dict[str, int], proxy_id: str | None = None
    ) -> dict[str, tuple[int, Any]]:
        held = dict(keys_to_snapshot_ids)
        if self._goals.pending():
            # This call is an acknowledgement: judge at once rather than next tick.
            self._longpoll.record_ack(proxy_id or ANONYMOUS, held)
            self._judge_goals()
        return await self._longpoll.listen(held, proxy_id, self._options.longpoll_timeout_s)

    async def report_load(
        self, proxy_id: str, loads: dict[str, tuple[int, int]], requests: dict[str, Any] | None = None,
        endpoint_requests: dict[str, Any] | None = None,
        reported: dict[str, float] | None = None,
        stalled: dict[str, dict[str, str]] | None = None,
    ) -> None:
        """Latest (ongoing, queued) per backend from one proxy; policy lives elsewhere.
        `requests`: the proxy's answers counted per backend, for rollout checks;
        `endpoint_requests`: the same per endpoint, for the status; `reported`: the
        sum of the loads the backend's replicas reported, as this proxy saw them;
        `stalled`: per backend, the replicas the proxy found hung (`proxy.pool.stalls`),
        replaced at the next tick."""
        for backend, replicas in (stalled or {}).items():
            for replica_id, seen in replicas.items():
                self._backends.replace_stalled(backend, str(replica_id), str(seen), time.monotonic())
        self._loads[proxy_id] = {b: (int(o), int(q)) for b, (o, q) in loads.items()}
        if requests:
            self._rollouts.record(proxy_id, requests)
        if endpoint_requests is not None:  # an empty first report too: the proxy starts from nothing
            report = {name: RequestStats.model_validate(stats) for name, stats in endpoint_requests.items()}
            self._endpoint_totals = self._endpoint_totals.absorb_after_first(proxy_id, report)
        self._autoscaler.record_report(
            proxy_id, self._loads[proxy_id], time.monotonic(), {b: float(r) for b, r in (reported or {}).items()}
        )

    async def replica_output(
        self, backend: str, since: float | None = None, cursors: dict[str, OutputCursor] | None = None
    ) -> list[ReplicaOutput]:
        """The own output (stdout, stderr) of every replica of `backend`, read by each replica
        from its node's log files: after each one's cursor, written since `since`, or its last lines."""
        cursors = cursors or {}
        wanted = [(r.replica_id, r.actor_name, cursors.get(r.replica_id)) for r in self._backends.replicas(backend)]
        return await self._adapter.replica_output(wanted, since)

    async def get_load(self) -> dict[str, dict[str, tuple[int, int]]]:
        return dict(self._loads)

    async def set_target_replicas(self, backend: str, target: int) -> None:
        """For the autoscaler: the one knob for how many replicas a backend wants."""
        if not self._backends.exists(backend):
            raise ValueError(f"unknown backend {backend!r}")
        self._backends.set_target(backend, target)
        self._save()

    # --- secrets (controller.state.secrets; values cross Ray sealed, never checkpointed) ------

    async def secrets_recipient(self) -> str:
        """The public key the agent seals backends' secret values to."""
        return self._secrets.recipient()

    async def put_secrets(self, sealed: bytes) -> list[str]:
        """Backends' secret values, sealed by the agent to `secrets_recipient()`."""
        return self._secrets.put(sealed)

    async def secrets_missing(self) -> list[str]:
        """Backends whose configs name secret values this controller does not hold."""
        return self._secrets.missing(self._backends.configs())

    # --- lifecycle and test hooks --------------------------------------------------

    async def ping(self) -> str:
        return "ok"

    async def arm_kill_switch(self, point: str) -> None:
        """Test hook: exit the process the next time the loop reaches `point`.

        Points: after_checkpoint, after_effects, after_api_checkpoint. Armed in
        memory only, so the restarted controller does not die again.
        """
        self._kill_at = point

    async def shutdown_all(self) -> None:
        """Stop the loop, every proxy and replica, and forget the checkpoint."""
        self._stopping = True
        self._loop_task.cancel()
        # Proxies stop taking requests first, then replicas finish theirs.
        for stage in (self._adapter.begin_proxy_shutdown(), self._adapter.begin_replica_drain(5.0)):
            if stage:
                await asyncio.wait([asyncio.ensure_future(_awaited(ref)) for ref in stage], timeout=6.0)
        self._adapter.stop_everything(self._backends.all_actor_names())
        self._storage.delete()

    async def process_info(self) -> dict[str, float]:
        """This process's CPU seconds so far, for the idle-CPU benchmark."""
        times = os.times()
        return {"pid": os.getpid(), "cpu_s": times.user + times.system, "ticks": self._ticks}


def _recent_error_only(status: BackendStatus, now: float) -> BackendStatus:
    """A backend's latest handler exception is shown while it is news: raised in the
    status's request window (the last minute), beside the 5xx answers it explains."""
    error = status.latest_error
    if error is None or now - error.at <= WINDOW_S:
        return status
    return status.model_copy(update={"latest_error": None})


async def _awaited(ref: Awaitable[None]) -> None:
    try:
        await ref
    except Exception:  # noqa: BLE001 — a proxy or replica already gone has nothing to finish
        pass
