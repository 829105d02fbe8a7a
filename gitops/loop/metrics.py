"""Every agent-side Prometheus metric of docs/reference/metrics.md ("Agent"), and nothing else.

Owned here: metric names, types, labels and histogram buckets on the agent
(served at `GET /metrics` on the admin port), and the translation of the
controller's observed `ClusterStatus` into gauges and counters. Not here: when
the agent records what (that is `gitops.loop.agent`), and the proxy's request
metrics (`proxy.observability.metrics`).

Each `AgentMetrics` owns its own `CollectorRegistry`, never the global one,
so a process (or a test) can hold several agents without name clashes.

Label cardinality is bounded by the spec, not by traffic: per backend one
series per replica state (6), one target series, one per restart reason and
two for autoscaling decisions (up, down); one proxy-restart series per node;
per endpoint one weight series per backend in its traffic; exactly one
applied-commit series (the previous commit's series is removed).
"""

from __future__ import annotations

import collections
import enum
import time
from typing import Callable, Hashable, Iterable, Mapping, TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gitops.status.rollup import SyncStatus
from vocabulary.control.longpoll import ReplicaState
from vocabulary.control.status import BackendStatus, ClusterStatus, EndpointStatus

__all__ = [
    "AgentMetrics",
    "CONTENT_TYPE",
    "RECONCILE_BUCKETS",
    "ReconcileResult",
    "restart_increments",
]

CONTENT_TYPE = CONTENT_TYPE_LATEST

# The text format exposes every counter's and histogram's creation time as an
# extra `<name>_created` gauge series that Prometheus stores but nothing here
# queries; it would double the series count. The switch is process-wide, and
# the processes exporting these metrics export nothing else.
disable_created_metrics()

# Reconciles and goals take tenths of a second (a no-op) to minutes (a
# rolling update of slow-starting replicas); commit-to-apply adds the poll
# interval (30 s by default), so the top buckets reach ten minutes.
RECONCILE_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class ReconcileResult(enum.StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"
    NOOP = "noop"




RestartKey = tuple[str, str]  # (backend, reason)
_Key = TypeVar("_Key", bound=Hashable)  # the labels of one cumulative count


def restart_increments(previous: Mapping[_Key, int], current: Mapping[_Key, int]) -> dict[_Key, int]:
    """How much each restart counter must grow, from two cumulative readings.

    The controller reports cumulative counts. A count lower than last time
    means the controller restarted and counted again from zero, so the whole
    new count happened since the reset; a Prometheus counter must never go
    back, so it grows by that count instead.
    """
    increments: dict[_Key, int] = {}
    for key, count in current.items():
        before = previous.get(key, 0)
        grown = count - before if count >= before else count
        if grown > 0:
            increments[key] = grown
    return increments


class AgentMetrics:
    """The agent's metrics, recorded through named events."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self.registry = CollectorRegistry(auto_describe=True)
        self._define(self.registry)
        self._applied: tuple[str, str] | None = None
        self._restart_counts: dict[RestartKey, int] = {}
        self._controller_restart_count = 0
        self._proxy_restart_counts: dict[str, int] = {}  # node -> count
        self._decision_counts: dict[tuple[str, str], int] = {}  # (backend, direction)
        self._backends: set[str] = set()
        self._weights: set[tuple[str, str]] = set()
        self._endpoints: set[str] = set()
        self._check_counts: dict[tuple[str, str, str, str], int] = {}
        for status in SyncStatus:
            self._sync_status.labels(status=status.value).set(0)

    def _define(self, r: CollectorRegistry) -> None:
        self._reconciles = Counter(
            "gitops_reconcile", "Reconciles by result.", ["result"], registry=r
        )
        for result in ReconcileResult:
            self._reconciles.labels(result=result.value)
        self._reconcile_duration = Histogram(
            "gitops_reconcile_duration_seconds",
            "Time from a reconcile's wake-up to its end.",
            buckets=RECONCILE_BUCKETS,
            registry=r,
        )
        self._commit_to_apply = Histogram(
            "gitops_commit_to_apply_seconds",
            "Time from a commit's commit time to its successful apply.",
            buckets=RECONCILE_BUCKETS,
            registry=r,
        )
        self._applied_info = Gauge(
            "gitops_applied_commit_info",
            "1 for the commit that is applied.",
            ["commit", "branch"],
            registry=r,
        )
        self._sync_status = Gauge(
            "gitops_sync_status", "1 for the current sync status.", ["status"], registry=r
        )
        self._git_fetches = Counter(
            "gitops_git_fetch", "Git fetches by result.", ["result"], registry=r
        )
        self._spans = Counter(
            "gitops_trace_spans",
            "Spans of the agent's apply traces sent to the OTLP endpoint (--otlp-endpoint), by result: "
            "exported, or failed (refused or unreachable; those spans are lost).",
            ["result"],
            registry=r,
        )
        self._verifications = Counter(
            "gitops_commit_verification",
            "Signature verdicts of attempted commits (--verify-commits).",
            ["result"],
            registry=r,
        )
        # Absent until the first success: an agent that never reached git has no last success.
        self._last_fetch_success = Gauge(
            "gitops_last_fetch_success_timestamp_seconds",
            "Unix time of the last successful read of the watched branch.",
            registry=r,
        )
        self._spec_errors = Gauge(
            "gitops_spec_errors", "Spec errors in the newest commit.", registry=r
        )
        self._drift = Counter(
            "gitops_drift_corrections", "Resyncs that found and corrected drift.", registry=r
        )
        self._goals_pending = Gauge(
            "gitops_goals_pending", "Controller goals the agent is waiting for.", registry=r
        )
        self._goal_duration = Histogram(
            "gitops_goal_duration_seconds",
            "Time from a goal's request to its end, by goal kind.",
            ["kind"],
            buckets=RECONCILE_BUCKETS,
            registry=r,
        )
        self._replicas = Gauge(
            "gitops_backend_replicas", "Replicas by state.", ["backend", "state"], registry=r
        )
        self._target = Gauge(
            "gitops_backend_target_replicas", "Target replicas.", ["backend"], registry=r
        )
        self._restarts = Counter(
            "gitops_replica_restarts",
            "Replica restarts by reason.",
            ["backend", "reason"],
            registry=r,
        )
        self._controller_restarts = Counter(
            "gitops_controller_restarts",
            "Times the controller came back (restarted by Ray or by the agent) and recovered its checkpoint.",
            registry=r,
        )
        self._proxy_restarts = Counter(
            "gitops_proxy_restarts",
            "Times a proxy worker came back as a new process (restarted in place by Ray, or replaced); "
            "node is the node id for a node's first worker, node:worker for the others.",
            ["node"],
            registry=r,
        )
        self._decisions = Counter(
            "gitops_autoscaling_decisions",
            "Autoscaling decisions that changed a backend's target replicas, by direction.",
            ["backend", "direction"],
            registry=r,
        )
        self._notifications = Counter(
            "gitops_notifications", "Notifications by provider and result.", ["provider", "result"], registry=r
        )
        self._traffic = Gauge(
            "gitops_endpoint_traffic_weight",
            "Share of an endpoint's traffic sent to a backend.",
            ["endpoint", "backend"],
            registry=r,
        )
        self._rollbacks = Counter(
            "gitops_rollbacks", "Rollbacks to an earlier commit, by reason.", ["reason"], registry=r
        )
        for reason in ("analysis", "apply_failed", "manual"):
            self._rollbacks.labels(reason=reason)
        self._rollout_step = Gauge(
            "gitops_rollout_step", "Current rollout step of an endpoint (1-based); 0 when none runs.",
            ["endpoint"], registry=r,
        )
        self._automation_runs = Counter(
            "gitops_automation_runs",
            "Looks of artifact automation at its moving reference, by automation and result (up_to_date, proposed, "
            "proposed_already, quarantined, error).",
            ["automation", "result"],
            registry=r,
        )
        self._automation_proposals = Counter(
            "gitops_automation_proposals",
            "New pins artifact automation proposed, by automation and mode (commit, pull_request).",
            ["automation", "mode"],
            registry=r,
        )
        self._automation_errors = Counter(
            "gitops_automation_errors", "Looks of artifact automation that ended in an error.", ["automation"], registry=r
        )
        self._rollout_checks = Counter(
            "gitops_rollout_checks",
            "Rollout step checks decided, by endpoint, backend, check and result (pass, fail).",
            ["endpoint", "backend", "check", "result"],
            registry=r,
        )

    # --- reconcile loop events ------------------------------------------------

    def reconcile_finished(self, result: str, duration_s: float) -> None:
        self._reconciles.labels(result=ReconcileResult(result).value).inc()
        self._reconcile_duration.observe(duration_s)

    def commit_applied(self, commit: str, branch: str, commit_time: float) -> None:
        """Record a successful apply; a re-apply of the same commit adds no latency."""
        if self._applied == (commit, branch):
            return
        self._commit_to_apply.observe(max(0.0, self._clock() - commit_time))
        if self._applied is not None:
            self._applied_info.remove(*self._applied)
        self._applied_info.labels(commit=commit, branch=branch).set(1)
        self._applied = (commit, branch)

    def sync_status(self, status: str) -> None:
        current = SyncStatus(status)
        for value in SyncStatus:
            self._sync_status.labels(status=value.value).set(1 if value is current else 0)

    def git_fetch(self, result: str) -> None:
        self._git_fetches.labels(result=result).inc()
        if result == "success":
            self._last_fetch_success.set(self._clock())

    def commit_verified(self, result: str) -> None:
        """One attempted commit's signature verdict: valid, unsigned or untrusted."""
        self._verifications.labels(result=result).inc()

    def spec_errors(self, count: int) -> None:
        self._spec_errors.set(count)

    def drift_corrected(self) -> None:
        self._drift.inc()

    def goal_finished(self, kind: str, duration_s: float) -> None:
        self._goal_duration.labels(kind=kind).observe(duration_s)

    def rolled_back(self, reason: str) -> None:
        """The agent went back to an earlier commit (`gitops.reconcile.rollback.RollbackReason`)."""
        self._rollbacks.labels(reason=reason).inc()

    def spans_sent(self, result: str, count: int) -> None:
        """Apply-trace spans exported or failed (`gitops.process.tracing`, on the exporter's thread)."""
        self._spans.labels(result=result).inc(count)

    def automation_run(self, automation: str, result: str) -> None:
        """One look of an automation (`gitops.loop.automation`); an error also counts in the errors."""
        self._automation_runs.labels(automation=automation, result=result).inc()
        if result == "error":
            self._automation_errors.labels(automation=automation).inc()

    def automation_proposal(self, automation: str, mode: str) -> None:
        self._automation_proposals.labels(automation=automation, mode=mode).inc()

    def notification_finished(self, provider: str, result: str) -> None:
        """One notification delivered, given up on, or dropped (`gitops.notifications`)."""
        self._notifications.labels(provider=provider, result=result).inc()

    # --- observed cluster -----------------------------------------------------

    def cluster_observed(self, cluster: ClusterStatus) -> None:
        """Mirror the controller's observed state (`vocabulary.control.status.ClusterStatus`)."""
        for name in self._backends - set(cluster.backends):
            self._forget_backend(name)
        for name, backend in cluster.backends.items():
            self._observe_backend(name, backend)
        self._backends = set(cluster.backends)
        self._observe_restarts(cluster.backends)
        self._observe_process_restarts(cluster)
        self._observe_decisions(cluster.backends)
        self._observe_traffic(cluster.endpoints)
        self._observe_rollouts(cluster)
        self._goals_pending.set(cluster.goals_pending)

    def _observe_rollouts(self, cluster: ClusterStatus) -> None:
        for name in self._endpoints - set(cluster.endpoints):
            _remove_quietly(self._rollout_step, (name,))
        for name in cluster.endpoints:
            rollout = cluster.rollouts.get(name)
            self._rollout_step.labels(endpoint=name).set(rollout.display_step() if rollout else 0)
        self._endpoints = set(cluster.endpoints)
        # Cumulative counts from the controller, kept across its restarts by its checkpoint.
        current = {(c.endpoint, c.backend, c.check, c.result): c.count for c in cluster.rollout_checks}
        for (endpoint, backend, check, result), grown in restart_increments(self._check_counts, current).items():
            self._rollout_checks.labels(endpoint=endpoint, backend=backend, check=check, result=result).inc(grown)
        self._check_counts = current

    def _observe_backend(self, name: str, backend: BackendStatus) -> None:
        counts = collections.Counter(replica.state for replica in backend.replicas)
        for state in ReplicaState:
            self._replicas.labels(backend=name, state=state.value).set(counts[state])
        self._target.labels(backend=name).set(backend.target_replicas)

    def _observe_restarts(self, backends: Mapping[str, BackendStatus]) -> None:
        current = {
            (name, reason.value): count
            for name, backend in backends.items()
            for reason, count in backend.restarts.items()
        }
        for (backend, reason), grown in restart_increments(self._restart_counts, current).items():
            self._restarts.labels(backend=backend, reason=reason).inc(grown)
        self._restart_counts = current

    def _observe_process_restarts(self, cluster: ClusterStatus) -> None:
        """The controller's count survives its restarts (checkpoint); the proxies'
        counts start again from zero with each controller, which
        `restart_increments` takes as a reset."""
        grown = restart_increments({(): self._controller_restart_count}, {(): cluster.controller_restarts})
        self._controller_restarts.inc(grown.get((), 0))
        self._controller_restart_count = cluster.controller_restarts
        current = {node: proxy.restarts for node, proxy in cluster.proxies.items()}
        for node in current:
            self._proxy_restarts.labels(node=node)  # every node's series exists, at 0 until a restart
        for node, count in restart_increments(self._proxy_restart_counts, current).items():
            self._proxy_restarts.labels(node=node).inc(count)
        self._proxy_restart_counts = current

    def _observe_decisions(self, backends: Mapping[str, BackendStatus]) -> None:
        # Cumulative counts from the controller, reset by its restarts, exactly like restarts.
        current = {
            (name, direction): count
            for name, backend in backends.items()
            for direction, count in backend.scaling_decisions.items()
        }
        grown = restart_increments(self._decision_counts, current)
        for backend, direction in current:
            # Touch every series so a backend that never scaled shows 0, not nothing.
            self._decisions.labels(backend=backend, direction=direction).inc(grown.get((backend, direction), 0))
        self._decision_counts = current

    def _observe_traffic(self, endpoints: Mapping[str, EndpointStatus]) -> None:
        current: dict[tuple[str, str], float] = {
            (name, backend): weight
            for name, endpoint in endpoints.items()
            for backend, weight in endpoint.traffic.items()
        }
        for pair in self._weights - set(current):
            self._traffic.remove(*pair)
        for (endpoint, backend), weight in current.items():
            self._traffic.labels(endpoint=endpoint, backend=backend).set(weight)
        self._weights = set(current)

    def _forget_backend(self, name: str) -> None:
        for state in ReplicaState:
            _remove_quietly(self._replicas, (name, state.value))
        _remove_quietly(self._target, (name,))
        for key in [key for key in self._restart_counts if key[0] == name]:
            _remove_quietly(self._restarts, key)
        for key in [key for key in self._decision_counts if key[0] == name]:
            _remove_quietly(self._decisions, key)

    # --- exposition -----------------------------------------------------------

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _remove_quietly(metric: Gauge | Counter, labels: Iterable[str]) -> None:
    """Remove one labelled series; a series never created is already gone."""
    try:
        metric.remove(*labels)
    except KeyError:
        pass
