"""The agent's status, rolled up in Flux's vocabulary. Pure.

`roll_up(facts)` turns what the agent knows after a tick (suspended?, what
is being applied, the last attempt and the last applied commit from the
ledger, a git error, the controller's observed `ClusterStatus`) into
`AgentStatus`: Ready / Reconciling / Stalled conditions with a CamelCase
reason and a message, `watched_revision`, `last_attempted_revision`,
`last_applied_revision`, each backend's replicas by state and version,
each endpoint's traffic, each rollout's step and checks, the quarantine
held by a rollback, every proxy worker of every node (`node:worker`), and one
overall `SyncStatus`. Each backend and endpoint carries how it served over the
last minute (`Serving`: request rate, 5xx share, p99, from the proxies' own
counts), and a backend its
replicas' latest handler exception; a backend answering 5xx
(`gitops.status.backend_health`) makes a `Degraded` condition with reason
`BackendErrors`, and the status Degraded when nothing more pressing holds. `AgentStatus` is a
pydantic model: the admin API serves `model_dump(mode="json")` and
`gitops status` parses the same JSON back with `model_validate`. Every
text it carries (repo, messages, errors) passes `gitops.redaction.redact`. Must not:
do I/O or keep state; the agent owns both.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field, field_serializer

from gitops.status.environment import EnvironmentSummary
from gitops.status.backend_health import BACKEND_ERRORS, Serving, erring_message
from gitops.errors import ErrorKind
from gitops.reconcile.outcomes import HistoryEntry, Outcome
from gitops.redaction import redact
from gitops.reconcile.rollback import Quarantine
from gitops.status.rollouts import rollout_message
from vocabulary.control.rollouts import Rollout
from vocabulary.control.request_stats import RequestStats
from vocabulary.control.status import BackendStatus, ClusterStatus, EndpointStatus, ProxyStatus, staging_lines

__all__ = [
    "SyncStatus", "Condition", "StatusFacts", "Serving", "BackendSummary", "EndpointSummary", "RolloutSummary", "ProxySummary",
    "AgentStatus",
    "roll_up",
]


class SyncStatus(str, enum.Enum):
    """Overall status, best to worst (Suspended and Held are choices, not healths)."""

    SYNCED = "Synced"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"
    HELD = "Held"  # newer commits wait: a sync window (SyncWindow) or a rollback (RolledBack) holds them


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Condition(_Value):
    type: str  # Ready | Reconciling | Stalled
    status: bool  # serialised as "True" / "False", as Kubernetes conditions are
    reason: str
    message: str

    @field_serializer("status")
    def _status_text(self, status: bool) -> str:
        return str(status)


@dataclass(frozen=True)
class StatusFacts:
    repo: str
    branch: str
    path: str
    suspended: bool = False
    watched: str | None = None  # the branch's newest commit, as last fetched
    applying: str | None = None  # commit being applied right now
    progress: str = ""  # e.g. "waiting for backend echo-v2 (2/5 actions)"
    last_attempt: HistoryEntry | None = None
    last_applied: HistoryEntry | None = None
    git_error: str | None = None
    git_reason: str = ""  # the git error's own reason (GitUnreachable, BranchNotFound)
    controller_error: str | None = None
    cluster: ClusterStatus | None = None  # controller.get_status()
    notifications: Mapping[str, Mapping[str, Any]] | None = None  # per provider, from gitops.notifications
    quarantine: Quarantine | None = None  # held back by a rollback (gitops.reconcile.rollback)
    environment: EnvironmentSummary | None = None  # --environment (gitops.loop.environment_duties)


class BackendSummary(_Value):
    """One backend as the status shows it: replicas counted by state and by version."""

    version: str
    target_replicas: int
    ready: int
    commit: str | None = None  # the commit its replicas' version was applied from
    replicas: dict[str, int] = Field(default_factory=dict)  # state -> count
    versions: dict[str, int] = Field(default_factory=dict)  # version -> count
    restarts: dict[str, int] = Field(default_factory=dict)  # reason -> count
    last_error: str | None = None
    serving: Serving = Field(default_factory=Serving)
    latest_exception: str | None = None  # its replicas' latest handler exception: "Type: message at file:line"
    # Models its starting replicas fetch now: "Staging model m: 1.2 / 4.0 GB on 2 nodes" (vocabulary.control.status).
    staging: tuple[str, ...] = ()
    pending: str | None = None  # why a replica it wants waits to be placed: "Pending: no node offers {GPU: 4} ..."
    # Its replicas a proxy ejected as outliers now: "replica r-3 ejected: 5 consecutive errors, back in 30 s".
    ejections: tuple[str, ...] = ()

    def problem(self) -> str:
        """Why the backend is unhealthy, or "" when it is not."""
        if self.ready < self.target_replicas:
            why = "; ".join(self.staging) or self.pending or self.last_error
            detail = f": {why}" if why else ""
            return f"{self.ready}/{self.target_replicas} replicas ready{detail}"
        return ""


class EndpointSummary(_Value):
    route: str
    traffic: dict[str, float] = Field(default_factory=dict)
    shadow: dict[str, float] = Field(default_factory=dict)
    serving: Serving = Field(default_factory=Serving)


class ProxySummary(_Value):
    """One proxy worker as the status shows it; a node's workers share its address."""

    node: str
    worker: int
    state: str  # starting | running | backoff
    address: str = ""
    restarts: int = 0
    last_error: str = ""


class RolloutSummary(_Value):
    """One endpoint's rollout as the status shows it: where it is among its steps, and its last checks."""

    phase: str  # stepping | paused | aborted | promoted
    step: int  # 1-based; 0 once over
    steps: tuple[float, ...]  # each step's share of the change
    passed: int  # steps passed
    weights: dict[str, float]
    target: dict[str, float]
    message: str
    checks: tuple[str, ...] = ()  # the last decision's checks, described


class AgentStatus(_Value):
    status: SyncStatus
    conditions: tuple[Condition, ...]
    repo: str
    branch: str
    path: str
    watched_revision: str | None
    last_attempted_revision: str | None
    last_applied_revision: str | None
    errors: tuple[str, ...]
    backends: dict[str, BackendSummary] = Field(default_factory=dict)
    endpoints: dict[str, EndpointSummary] = Field(default_factory=dict)
    notifications: dict[str, dict[str, Any]] = Field(default_factory=dict)  # per provider
    rollouts: dict[str, RolloutSummary] = Field(default_factory=dict)  # by endpoint
    quarantine: dict[str, Any] | None = None  # good commit, held commits, reason (Quarantine.to_json)
    proxies: dict[str, ProxySummary] = Field(default_factory=dict)  # by proxy id: node, or node:worker past the first
    environment: EnvironmentSummary | None = None  # branch, a sync window's hold, the promotion
    # Artifact automation's last look at each reference, and automation.toml's errors
    # (`gitops.loop.automation.automation_status`); set by the admin API when the agent runs it.
    automation: dict[str, Any] | None = None

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)


def roll_up(facts: StatusFacts) -> AgentStatus:
    cluster = facts.cluster or ClusterStatus()
    backends = {name: _backend(observed, cluster.serving.get(name),
                               cluster.serving_windows.get(name, cluster.serving_window_s))
                for name, observed in cluster.backends.items()}
    endpoints = {name: _endpoint(name, observed, cluster) for name, observed in cluster.endpoints.items()}
    status, reason, message = _overall(facts, backends)
    return AgentStatus(
        status=status,
        conditions=_conditions(facts, status, reason, redact(message), redact(erring_message(backends))),
        repo=redact(facts.repo),
        branch=facts.branch,
        path=facts.path,
        watched_revision=facts.watched,
        last_attempted_revision=facts.applying or (facts.last_attempt.commit if facts.last_attempt else None),
        last_applied_revision=facts.last_applied.commit if facts.last_applied else None,
        errors=tuple(redact(error) for error in _errors(facts)),
        backends=backends,
        endpoints=endpoints,
        notifications={name: dict(health) for name, health in (facts.notifications or {}).items()},
        rollouts={name: _rollout(rollout) for name, rollout in cluster.rollouts.items()},
        quarantine=facts.quarantine.to_json() if facts.quarantine is not None else None,
        proxies={key: _proxy(key, observed) for key, observed in cluster.proxies.items()},
        environment=facts.environment,
    )


def _proxy(key: str, observed: ProxyStatus) -> ProxySummary:
    return ProxySummary(
        node=key.partition(":")[0], worker=observed.worker, state=observed.state.value, address=observed.address,
        restarts=observed.restarts, last_error=redact(observed.last_error),
    )


# The Ready condition's reason for each failed outcome.
_FAILED_REASONS = {
    Outcome.INVALID: "ValidationFailed",
    Outcome.UNVERIFIED: "CommitNotVerified",
    Outcome.FAILED: "ReconciliationFailed",
}


def _overall(facts: StatusFacts, backends: Mapping[str, BackendSummary]) -> tuple[SyncStatus, str, str]:
    """The status with the Ready condition's reason and message."""
    last = facts.last_attempt
    if facts.suspended:
        return SyncStatus.SUSPENDED, "Suspended", "reconciliation is suspended"
    if facts.applying:
        staging = [line for _, backend in sorted(backends.items()) for line in backend.staging]
        staging += [f"{name}: {backend.pending}" for name, backend in sorted(backends.items()) if backend.pending]
        applying = f"applying {facts.applying[:7]} {facts.progress}".strip()
        return SyncStatus.PROGRESSING, "Progressing", "; ".join([applying, *staging])
    if facts.git_error:
        return SyncStatus.FAILED, facts.git_reason or "GitOperationFailed", facts.git_error
    if facts.controller_error:
        return SyncStatus.FAILED, "ControllerUnavailable", facts.controller_error
    held = facts.environment.held if facts.environment is not None else None
    if held is not None:
        return SyncStatus.HELD, held.reason, redact(f"{held.commit[:7]} waits: {held.message}")
    if last is None:
        return SyncStatus.PROGRESSING, "Progressing", "waiting for the first reconcile"
    if last.result in _FAILED_REASONS:
        return SyncStatus.FAILED, _FAILED_REASONS[last.result], _failure_message(last)
    if last.result is Outcome.SUPERSEDED:
        return SyncStatus.PROGRESSING, "Progressing", f"{last.commit[:7]} superseded by a newer commit"
    if last.result is Outcome.ABORTED:
        return SyncStatus.DEGRADED, "RolloutAborted", _failure_message(last)
    rolling = rollout_message(facts.cluster.rollouts) if facts.cluster is not None else ""
    if rolling:
        return SyncStatus.PROGRESSING, "RollingOut", rolling
    unhealthy = [f"{name}: {b.problem()}" for name, b in sorted(backends.items()) if b.problem()]
    if unhealthy:
        return SyncStatus.DEGRADED, "HealthCheckFailed", "; ".join(unhealthy)
    erring = erring_message(backends)
    if erring:
        return SyncStatus.DEGRADED, BACKEND_ERRORS, erring
    if facts.quarantine is not None:
        return SyncStatus.HELD, "RolledBack", _held_message(facts.quarantine)
    return SyncStatus.SYNCED, "ReconciliationSucceeded", f"applied revision {last.branch}@{last.commit[:7]}"


def _held_message(held: Quarantine) -> str:
    commits = ", ".join(sorted(sha[:7] for sha in held.held))
    return (f"rolled back to {held.good[:7]} ({held.reason.value}); holding {commits} "
            "until a newer commit arrives")


def _failure_message(entry: HistoryEntry) -> str:
    first = entry.errors[0] if entry.errors else "unknown error"
    more = f" (and {len(entry.errors) - 1} more)" if len(entry.errors) > 1 else ""
    return f"{entry.commit[:7]}: {first}{more}"


def _stalled(facts: StatusFacts, status: SyncStatus) -> bool:
    """Retrying the same input cannot help: only a new commit can."""
    last = facts.last_attempt
    if status is not SyncStatus.FAILED or last is None or facts.git_error or facts.controller_error:
        return False
    return last.result.error_kind is ErrorKind.STALLED


def _conditions(
    facts: StatusFacts, status: SyncStatus, reason: str, message: str, erring: str
) -> tuple[Condition, ...]:
    ready = status is SyncStatus.SYNCED
    conditions = [Condition(type="Ready", status=ready, reason=reason, message=message)]
    if erring:
        # Whatever the overall status: a backend answering 5xx is news while a commit applies too.
        conditions.append(Condition(type="Degraded", status=True, reason=BACKEND_ERRORS, message=erring))
    if status is SyncStatus.PROGRESSING:
        conditions.append(Condition(type="Reconciling", status=True, reason="Progressing", message=message))
    if _stalled(facts, status):
        conditions.append(Condition(type="Stalled", status=True, reason=reason, message=message))
    return tuple(conditions)


def _errors(facts: StatusFacts) -> tuple[str, ...]:
    errors: list[str] = []
    if facts.git_error:
        errors.append(facts.git_error)
    if facts.controller_error:
        errors.append(facts.controller_error)
    if facts.last_attempt and not facts.last_attempt.result.ok:
        errors.extend(facts.last_attempt.errors)
    return tuple(errors)


def _backend(observed: BackendStatus, stats: RequestStats | None, window_s: float) -> BackendSummary:
    return BackendSummary(
        version=observed.version,
        target_replicas=observed.target_replicas,
        ready=observed.ready(),
        commit=observed.commit,
        replicas=dict(Counter(r.state.value for r in observed.replicas)),
        versions=dict(Counter(r.version for r in observed.replicas)),
        restarts={reason.value: count for reason, count in observed.restarts.items()},
        last_error=observed.last_error or None,
        serving=Serving.of(stats or RequestStats(), window_s),
        latest_exception=redact(observed.latest_error.describe()) if observed.latest_error else None,
        staging=tuple(staging_lines(observed.staging)),
        pending=observed.pending or None,
        ejections=tuple(ejection.message() for ejection in observed.ejections),
    )


def _endpoint(name: str, observed: EndpointStatus, cluster: ClusterStatus) -> EndpointSummary:
    stats = cluster.endpoint_serving.get(name, RequestStats())
    return EndpointSummary(route=observed.route, traffic=dict(observed.traffic), shadow=dict(observed.shadow),
                           serving=Serving.of(stats, cluster.serving_window_s))


def _rollout(rollout: Rollout) -> RolloutSummary:
    return RolloutSummary(
        phase=rollout.phase.value,
        step=rollout.display_step(),
        steps=rollout.config.steps,
        passed=len(rollout.passed),
        weights=rollout.weights(),
        target=dict(rollout.target),
        message=redact(rollout.message()),
        checks=tuple(check.describe() for check in rollout.checks),
    )
