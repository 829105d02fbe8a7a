"""The control loop: one tick observes, decides in the state machines, checkpoints, acts.

Owns the controller's state between RPCs (the `Checkpointed` machines, the
proxy fleet, the autoscaler, load reports, error counts and the last
minute's requests), recovery from the checkpoint at start, the tick
(proxies checked, autoscaling, the replica machine stepped, its effects
carried out through a `ClusterAdapter`, rollouts stepped, goals judged), the
rollouts' PromQL checks asked beside it, and the order every change keeps:
checkpointed before any actor is started or stopped, and before proxies
hear of it. The loop catches, logs and counts every error and never dies.
What each RPC asks of it, `controller.actor` (the Ray façade) calls here;
the options it runs with and the adapter protocol it acts through are
defined here too.
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

from controller.persistence.checkpoint import Checkpointer
from controller.policies.autoscaling import Autoscaler
from controller.policies.recent_requests import WINDOW_S, RecentRequests
from controller.policies.request_totals import RequestTotals
from controller.shell import malloc_arenas
from controller.state.backend_state import BackendOptions, Effect, Observer, Probe, replica_actor_name
from controller.state.checkpointed import Checkpointed
from controller.state.endpoint_state import check_backend_deletable
from controller.state.goals import GoalKind
from controller.state.judging import fingerprint, judge
from controller.state.longpoll import ANONYMOUS, LongPollHost
from controller.state.ownership import claim
from controller.state.proxy_fleet import ProxyEffect, ProxyFleet, ProxySpec, StopProxy
from controller.state.publishing import Publisher
from vocabulary.control.goals import GoalResult
from vocabulary.spec.backends import BackendConfig
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.control.goal_api import PROXY_CLASS
from vocabulary.control.ownership import Owner
from vocabulary.control.proxy_workers import DEFAULT_MAX_CONNECTIONS
from vocabulary.replicas.replica_output import OutputCursor, ReplicaOutput
from vocabulary.control.request_stats import RequestStats
from vocabulary.control.rollouts import MetricQuery, MetricReading
from vocabulary.control.status import (
    BackendStatus, ClusterStatus, EndpointStatus, GoalTiming, NodeResources, ReplicaEjection, ReplicaFailure, RestartReason,
)

__all__ = ["Asker", "ClusterAdapter", "ControlLoop", "ControllerOptions"]

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
    # node's CPUs, at most vocabulary.control.proxy_workers.DEFAULT_WORKERS_CAP.
    proxy_workers: int = 1
    # Open connections each proxy worker takes; past it, 503 with Retry-After.
    proxy_max_connections: int = DEFAULT_MAX_CONNECTIONS
    # Each node's proxies also serve gRPC on this port (`gitops run --grpc-port`; None: off).
    proxy_grpc_port: int | None = None
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

    def node_resources(self) -> dict[str, NodeResources]:
        """Each alive node's resources and what is free of them now."""

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

    def last_words(self, actor_name: str) -> ReplicaOutput | None:
        """What a replica replaced as broken had written, read just before its kill (None: not read)."""


# Asks rollouts' PromQL checks of the Prometheus at a base URL (None: none):
# each query with its reading (see controller.shell.prometheus).
Asker = Callable[[str | None, tuple[MetricQuery, ...]], Awaitable[list[tuple[MetricQuery, MetricReading]]]]


class ControlLoop:
    """The controller's state and its loop; every RPC of `ControllerActor` lands here or in a room it holds."""

    def __init__(self, options: ControllerOptions, controller_name: str, checkpointer: Checkpointer,
                 adapter: ClusterAdapter, asker: Callable[[], Asker]) -> None:
        """`asker` builds the Prometheus asker when the first check is due."""
        self.options = options
        self._name = controller_name
        self._checkpointer = checkpointer
        self._adapter = adapter
        self._new_asker = asker
        self._asker: Asker | None = None
        self.proxies = ProxyFleet(self._proxy_spec())
        self.longpoll = LongPollHost()
        self.publisher = Publisher(self.longpoll, adapter.handle)
        self.errors: Counter = Counter()
        self.loads: dict[str, dict[str, tuple[int, int]]] = {}
        # Per proxy, per backend, the replicas it ejected as outliers: id -> (reason, count, until), monotonic.
        self._ejections: dict[str, dict[str, dict[str, tuple[str, int, float]]]] = {}
        self.autoscaler = Autoscaler()
        self.kill_at: str | None = None
        self.ticked = asyncio.Event()
        self.stopping = False
        self.ticks = 0
        self._next_proxy_check = 0.0
        self._failures: deque[ReplicaFailure] = deque(maxlen=100)  # shown in status, for the agent's log
        self._recent = RecentRequests()  # each backend's requests in the last minute, for status
        self._serving_versions: dict[str, str] = {}  # backend -> the version all its replicas ran at the last look
        self._endpoint_totals = RequestTotals()  # each endpoint's, summed over proxies (not checkpointed)
        # The same reports added up in full (a proxy's first report too): what promotions are judged on.
        self._endpoint_outcomes = RequestTotals()
        self._recent_endpoints = RecentRequests()  # each endpoint's requests in the last minute, for status
        self.held = self._recover()
        self.publisher.endpoints(self.held.endpoints, self.held.rollouts)
        # Know the proxies before the first call, so no goal is judged against none.
        self._check_proxies(time.monotonic())
        self._analysis: asyncio.Future[None] | None = None

    # --- recovery and checkpoints -------------------------------------------

    def _recover(self) -> Checkpointed:
        body = self._checkpointer.load()
        options = self.options.backend
        if body is None:
            return Checkpointed.fresh(options, self.options.prometheus_url)
        held = Checkpointed.from_json(body, options, self.options.prometheus_url)
        found = self._adapter.adopt(held.backends.all_actor_names())
        effects = held.backends.recover(time.monotonic(), found)
        logger.warning(
            "controller restarted (restart %d): recovered %d backends, %d endpoints from its checkpoint; "
            "%d replica actors found alive", held.restarts, len(held.backends.names()), len(held.endpoints.all()),
            len(found),
        )
        self.held = held
        self._log_failures()
        self.save()
        self._adapter.apply(effects)
        leaked = self._adapter.sweep_leaks(held.backends.all_actor_names())
        if leaked:
            logger.warning("killed %d replica actors unknown to the checkpoint", len(leaked))
        return held

    def save(self) -> None:
        body = self.held.to_json()
        self.held.backends.dirty = False
        self.held.rollouts.dirty = False
        self._checkpointer.save(body)

    def maybe_die(self, point: str) -> None:
        if self.kill_at == point:
            logger.warning("kill switch at %s", point)
            os._exit(1)

    # --- the loop --------------------------------------------------------------

    async def run(self) -> None:
        trimmed = time.monotonic()
        while not self.stopping:
            try:
                self._tick()
                self._analyse()
            except Exception:  # never die: count, log, try again next tick
                self.errors["tick"] += 1
                logger.exception("controller tick failed")
            if time.monotonic() - trimmed >= _TRIM_EVERY_S:
                await asyncio.to_thread(malloc_arenas.trim)  # 10-40 ms on a fragmented heap: off the loop
                trimmed = time.monotonic()
            await asyncio.sleep(self.options.tick_s)

    def _note_new_versions(self, now: float) -> None:
        """A backend whose replicas all came to run a new version is counted afresh for status,
        from the totals as they stand (called at the end of every tick, in the one that saw the
        change: a goal met is never reported before it, so an answer after `Synced` counts)."""
        backends = self.held.backends
        seen, self._serving_versions = self._serving_versions, {}
        for name in backends.names():
            version = backends.serving_version(name) or seen.get(name)
            if version is None:
                continue
            self._serving_versions[name] = version
            if seen.get(name) not in (None, version):
                self._recent.new_version(name, self.held.rollouts.totals(), now)

    def _tick(self) -> None:
        now = time.monotonic()
        backends = self.held.backends
        self.ticks += 1
        self._check_proxies(now)
        self._autoscale(now)
        if self._recent.due(now):
            for erring in self._recent.sample(self.held.rollouts.totals(), now):
                backends.check_soon(erring)  # their health checks answer the latest exception
        self._recent_endpoints.sample(self._endpoint_totals.totals, now)
        effects = backends.tick(now, self._adapter)
        self._log_failures()
        if backends.dirty:
            self.save()
        self.maybe_die("after_checkpoint")
        # Proxies learn a replica is leaving before it starts to drain.
        self.publisher.replicas(backends)
        self.apply(effects)
        self.maybe_die("after_effects")
        self._step_rollouts()
        self.judge_goals()
        self._note_new_versions(now)

    def _log_failures(self) -> None:
        for failure in self.held.backends.take_failures():
            logger.warning("%s", failure.message())
            self._failures.append(failure.model_copy(update={"at": time.time()}))

    def _step_rollouts(self) -> None:
        """Advance every rollout; checkpoint a step before proxies are told of it."""
        moved = self.held.rollouts.tick(time.time())
        if self.held.rollouts.dirty:
            self.save()
        for name in moved:
            self.publish_endpoint(name)

    def _analyse(self) -> None:
        """Ask Prometheus the rollouts' due PromQL checks, one batch at a time, beside the loop."""
        if self._analysis is not None and not self._analysis.done():
            return
        due = self.held.rollouts.due_queries(time.time())
        if due:
            self._analysis = asyncio.ensure_future(self._ask(due))

    async def _ask(self, due: tuple[MetricQuery, ...]) -> None:
        try:
            if self._asker is None:
                self._asker = self._new_asker()
            answers = await self._asker(self.held.prometheus_url, due)
        except Exception:
            self.errors["analysis"] += 1
            logger.exception("asking Prometheus failed")
            return
        for query, reading in answers:
            if reading.error is not None:
                logger.warning("rollout %s: metric check %s for %s: %s",
                               query.endpoint, query.check, query.backend, reading.error)
            self.held.rollouts.record_readings(query.endpoint, [reading])

    def judge_goals(self) -> None:
        if self.held.goals.evaluate(self._judge, time.time()):
            self.save()
        self.ticked.set()
        self.ticked = asyncio.Event()

    def _autoscale(self, now: float) -> None:
        """Turn the target-replicas knob of autoscaled backends (policy: controller.policies.autoscaling)."""
        backends = self.held.backends
        autoscaled = {
            name: (backends.target(name), config.autoscaling)
            for name, config in backends.configs().items()
            if config.autoscaling is not None
        }
        running = {name: len(backends.running(name)) for name in autoscaled}
        for decision in self.autoscaler.tick(autoscaled, now, running).values():
            if decision.changed:
                logger.info("autoscaling %s: %d -> %d replicas, %s", decision.backend,
                            decision.current, decision.desired, decision.reason)
                backends.set_target(decision.backend, decision.desired)

    def apply(self, effects: list[Effect]) -> None:
        if effects:
            self._adapter.apply(effects)

    def _proxy_spec(self) -> ProxySpec | None:
        opts = self.options
        if opts.proxy_class is None:
            return None
        return ProxySpec(opts.proxy_class, self._name, opts.proxy_host, opts.proxy_port,
                         opts.proxy_metrics_port, opts.proxy_workers, opts.proxy_max_connections,
                         opts.proxy_grpc_port)

    def _check_proxies(self, now: float) -> None:
        """Refresh node facts and keep each alive node's proxy workers; a stopped worker's acks are
        forgotten, and so is the load of one that is gone for good (its node left, or fewer workers)."""
        if now < self._next_proxy_check:
            return
        self._next_proxy_check = now + self.options.proxy_check_s
        try:
            alive = self._adapter.refresh_nodes()
            effects = self.proxies.tick(now, alive, self._adapter.proxy_probes(), self._adapter.node_cpus())
            self._adapter.apply(effects)
        except Exception:
            self.errors["proxies"] += 1
            logger.exception("proxy reconciliation failed")
            return
        nodes = max(1, len(alive)) if self.proxies.spec is not None else 1
        self.publisher.on_proxy_nodes(nodes, self.held.endpoints)
        for effect in effects:
            if isinstance(effect, StopProxy):
                self.longpoll.forget(effect.proxy_id)
                if not effect.error:
                    self.loads.pop(effect.proxy_id, None)
                    self._ejections.pop(effect.proxy_id, None)

    def _judge(self, goal: Any) -> Any:
        held = self.held
        return judge(goal, held.backends, held.endpoints, self.longpoll, self.proxies.live(), self.proxies.serving())

    def publish_endpoint(self, name: str) -> None:
        self.publisher.endpoint(name, self.held.endpoints, self.held.rollouts)

    # --- what the goal API asks ------------------------------------------------

    def apply_backend(self, config: BackendConfig) -> str:
        effects = self.held.backends.apply(config)
        goal_id = self.held.goals.request(GoalKind.BACKEND_READY, config.name, fingerprint(config), time.time(),
                                          self._judge)
        self.save()
        self.maybe_die("after_api_checkpoint")
        self.apply(effects)
        return goal_id

    def delete_backend(self, name: str) -> str:
        check_backend_deletable(name, self.held.endpoints)
        self.held.backends.delete(name)
        goal_id = self.held.goals.request(GoalKind.BACKEND_DELETED, name, "", time.time(), self._judge)
        self.save()
        return goal_id

    def apply_endpoint(self, config: EndpointConfig) -> str:
        held = self.held
        current = held.endpoints.get(config.name)
        live = None if current is None else held.rollouts.served(current).traffic
        held.endpoints.apply(config, held.backends.configs())
        held.rollouts.on_endpoint(config, live, time.time())
        goal_id = held.goals.request(GoalKind.ENDPOINT_ACKED, config.name, fingerprint(config), time.time(),
                                     self._judge)
        self.save()
        self.publish_endpoint(config.name)
        return goal_id

    def decide_rollout(self, endpoint: str, verb: str, who: str) -> str:
        """Promote or abort a running rollout by hand; checkpointed before proxies are told."""
        message = self.held.rollouts.decide(endpoint, verb, who)
        self.save()
        self.publish_endpoint(endpoint)
        return message

    def delete_endpoint(self, name: str) -> str:
        self.held.endpoints.delete(name)
        self.held.rollouts.forget(name)
        goal_id = self.held.goals.request(GoalKind.ENDPOINT_DELETED, name, "", time.time(), self._judge)
        self.save()
        self.publish_endpoint(name)
        return goal_id

    async def wait_for_goal(self, goal_id: str, timeout_s: float) -> GoalResult:
        deadline = time.monotonic() + timeout_s
        while True:
            result = self.held.goals.result(goal_id)
            if result is None:
                raise ValueError(f"unknown goal {goal_id!r} (never issued, or long forgotten)")
            remaining = deadline - time.monotonic()
            if result.state.value != "pending" or remaining <= 0:
                return result
            try:
                await asyncio.wait_for(self.ticked.wait(), timeout=min(remaining, 1.0))
            except TimeoutError:
                pass

    # --- the owning agent and its settings ----------------------------------------

    def claim(self, candidate: Owner, take_over: bool) -> Owner | None:
        """Record `candidate` as this controller's agent; the other owner if refused."""
        holder = claim(self.held.owner, candidate, take_over)
        if holder is not None:
            return holder
        if self.held.owner is not None and self.held.owner.agent_id != candidate.agent_id:
            logger.warning("agent %s took over from %s", candidate.agent_id, self.held.owner.agent_id)
        self.held.owner = candidate
        self.save()
        return None

    def release(self, agent_id: str) -> None:
        """Forget the owner if it is still `agent_id` (its agent stopped cleanly)."""
        if self.held.owner is not None and self.held.owner.agent_id == agent_id:
            self.held.owner = None
            self.save()

    def set_prometheus_url(self, url: str | None) -> None:
        """The agent's --prometheus-url, given at each of its starts: it reaches a
        controller already running, and is checkpointed so a restart keeps it."""
        if url == self.held.prometheus_url:
            return
        # Its host and port only: a URL may hold credentials.
        where = f"Prometheus at {urlsplit(url).netloc.rpartition('@')[2]}" if url else "no Prometheus"
        logger.info("rollouts' metric checks now ask %s", where)
        self.held.prometheus_url = url
        self.save()

    # --- proxies: acknowledgements, load reports ---------------------------------

    def acknowledged(self, proxy_id: str | None, held_ids: dict[str, int]) -> None:
        """A long-poll call is an acknowledgement: judge pending goals at once rather than next tick."""
        if self.held.goals.pending():
            self.longpoll.record_ack(proxy_id or ANONYMOUS, held_ids)
            self.judge_goals()

    def report_load(
        self, proxy_id: str, loads: dict[str, tuple[int, int]], requests: dict[str, Any] | None,
        endpoint_requests: dict[str, Any] | None, reported: dict[str, float] | None,
        stalled: dict[str, dict[str, str]] | None, ejected: dict[str, dict[str, dict[str, Any]]] | None = None,
    ) -> None:
        now = time.monotonic()
        for backend, replicas in (stalled or {}).items():
            for replica_id, seen in replicas.items():
                self.held.backends.replace_stalled(backend, str(replica_id), str(seen), now)
        out: dict[str, dict[str, tuple[str, int, float]]] = {}
        for backend, ejections in (ejected or {}).items():
            for replica_id, ejection in ejections.items():
                reason, count = str(ejection.get("reason", "")), int(ejection.get("count", 1))
                if ejection.get("replace"):
                    self.held.backends.replace_stalled(
                        backend, str(replica_id), f"ejected {count} times as an outlier, the last: {reason}", now,
                        RestartReason.EJECTED.value,
                    )
                else:
                    out.setdefault(backend, {})[str(replica_id)] = (reason, count, now + float(ejection["back_in_s"]))
        self._ejections[proxy_id] = out
        self.loads[proxy_id] = {b: (int(o), int(q)) for b, (o, q) in loads.items()}
        if requests:
            self.held.rollouts.record(proxy_id, requests)
        if endpoint_requests is not None:  # an empty first report too: the proxy starts from nothing
            report = {name: RequestStats.model_validate(stats) for name, stats in endpoint_requests.items()}
            self._endpoint_totals = self._endpoint_totals.absorb_after_first(proxy_id, report)
            self._endpoint_outcomes = self._endpoint_outcomes.absorb(proxy_id, report)
        self.autoscaler.record_report(
            proxy_id, self.loads[proxy_id], time.monotonic(), {b: float(r) for b, r in (reported or {}).items()}
        )

    def endpoint_totals(self) -> dict[str, RequestStats]:
        """Each endpoint's answers and shadow comparisons, every proxy's reports added up, each
        from its first: cumulative since the proxies started (a gone proxy's share stays in)."""
        return dict(self._endpoint_outcomes.totals)

    def set_target_replicas(self, backend: str, target: int) -> None:
        if not self.held.backends.exists(backend):
            raise ValueError(f"unknown backend {backend!r}")
        self.held.backends.set_target(backend, target)
        self.save()

    # --- what it shows -------------------------------------------------------------

    def status(self) -> ClusterStatus:
        now = time.monotonic()
        held = self.held
        window_s, serving = self._recent.last_minute(held.rollouts.totals(), now)
        _, endpoint_serving = self._recent_endpoints.last_minute(self._endpoint_totals.totals, now)
        try:
            nodes = self._adapter.node_resources()
        except Exception:  # noqa: BLE001 — a status without node facts rather than none
            self.errors["nodes"] += 1
            nodes = {}
        return ClusterStatus(
            nodes=nodes,
            backends={
                n: _recent_error_only(held.backends.status(n), time.time()).model_copy(
                    update={"scaling_decisions": self.autoscaler.decisions(n),
                            "ejections": _ejections(self._ejections, n, now)})
                for n in held.backends.names()
            },
            endpoints=self._endpoint_status(),
            proxies=self.proxies.proxy_status(),
            goals_pending=len(held.goals.pending()),
            goal_durations=tuple(GoalTiming.model_validate(d) for d in held.goals.durations()[-100:]),
            errors=dict(self.errors),
            ticks=self.ticks,
            controller_restarts=held.restarts,
            replica_failures=tuple(self._failures),
            load={p: dict(loads) for p, loads in self.loads.items()},
            rollouts=held.rollouts.rollouts(),
            rollout_checks=held.rollouts.check_counts(),
            serving=serving,
            serving_window_s=window_s,
            serving_windows=self._recent.shorter_windows(now),
            endpoint_serving=endpoint_serving,
        )

    def _endpoint_status(self) -> dict[str, EndpointStatus]:
        """Each endpoint as the proxies serve it: during a rollout, at its current step's weights."""
        configs = self.held.endpoints.all()
        return {
            name: status.model_copy(update={"traffic": self.held.rollouts.served(configs[name]).traffic})
            for name, status in self.held.endpoints.status().items()
        }

    async def replica_output(
        self, backend: str, since: float | None, cursors: dict[str, OutputCursor],
    ) -> list[ReplicaOutput]:
        """The output of `backend`'s replicas now, then how each of its replicas replaced
        since this controller started ended (of the last 100 replaced; since `since`, when
        given), oldest first, with its own last lines where they were read before the kill:
        a backend deleted since (its commit failed) still shows why its replicas failed."""
        replaced = [f for f in self._failures if f.backend == backend]
        ended = [
            ReplicaOutput(
                replica_id=f.replica_id, ended=f.ending(), err=tuple((f.error or f.reason).splitlines()),
                last_output=self._last_lines(f.replica_id),
            )
            for f in replaced if since is None or f.at >= since
        ]
        try:
            records = self.held.backends.replicas(backend)
        except ValueError:
            if not replaced:
                raise
            records = []
        wanted = [(r.replica_id, r.actor_name, cursors.get(r.replica_id)) for r in records]
        return [*await self._adapter.replica_output(wanted, since), *ended]

    def _last_lines(self, replica_id: str) -> tuple[str, ...]:
        """A replaced replica's own last stdout then stderr lines, if they were read before its kill."""
        words = self._adapter.last_words(replica_actor_name(replica_id))
        return () if words is None else (*words.out, *words.err)

    # --- stopping --------------------------------------------------------------------

    async def shutdown_all(self) -> None:
        """Every proxy and replica stopped, and the checkpoint forgotten (the loop already stopped)."""
        # Proxies stop taking requests first, then replicas finish theirs.
        for stage in (self._adapter.begin_proxy_shutdown(), self._adapter.begin_replica_drain(5.0)):
            if stage:
                await asyncio.wait([asyncio.ensure_future(_awaited(ref)) for ref in stage], timeout=6.0)
        self._adapter.stop_everything(self.held.backends.all_actor_names())
        self._checkpointer.delete()


def _ejections(
    reports: dict[str, dict[str, dict[str, tuple[str, int, float]]]], backend: str, now: float,
) -> tuple[ReplicaEjection, ...]:
    """`backend`'s replicas ejected now by any proxy worker, each once (the latest-ending
    ejection of it a worker reported), by replica id."""
    latest: dict[str, tuple[str, int, float]] = {}
    for report in reports.values():
        for replica_id, seen in report.get(backend, {}).items():
            if seen[2] > now and (replica_id not in latest or seen[2] > latest[replica_id][2]):
                latest[replica_id] = seen
    return tuple(
        ReplicaEjection(replica_id=rid, reason=reason, count=count, back_in_s=until - now)
        for rid, (reason, count, until) in sorted(latest.items())
    )


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
