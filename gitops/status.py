"""The agent's status, rolled up in Flux's vocabulary. Pure.

`roll_up(facts)` turns what the agent knows after a tick (suspended?, what
is being applied, the last attempt and the last applied commit from the
ledger, a git error, the controller's observed status) into `AgentStatus`:
Ready / Reconciling / Stalled conditions with a CamelCase reason and a
message, `watched_revision`, `last_attempted_revision`,
`last_applied_revision`, each backend's replicas by state and version,
each endpoint's traffic, and one overall `SyncStatus`. Must not: do I/O or
keep state; the agent owns both.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping

from gitops.history import HistoryEntry, Outcome

__all__ = ["SyncStatus", "Condition", "StatusFacts", "AgentStatus", "roll_up"]


class SyncStatus(str, enum.Enum):
    """Overall status, best to worst (Suspended is a choice, not a health)."""

    SYNCED = "Synced"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"


@dataclass(frozen=True)
class Condition:
    type: str  # Ready | Reconciling | Stalled
    status: bool
    reason: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "status": str(self.status), "reason": self.reason, "message": self.message}


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
    controller_error: str | None = None
    cluster: Mapping[str, Any] | None = None  # controller.get_status()
    notifications: Mapping[str, Mapping[str, Any]] | None = None  # per provider, from gitops.notifications


@dataclass(frozen=True)
class AgentStatus:
    status: SyncStatus
    conditions: tuple[Condition, ...]
    repo: str
    branch: str
    path: str
    watched_revision: str | None
    last_attempted_revision: str | None
    last_applied_revision: str | None
    errors: tuple[str, ...]
    backends: dict[str, dict[str, Any]] = field(default_factory=dict)
    endpoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    notifications: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "conditions": [c.to_json() for c in self.conditions],
            "repo": self.repo,
            "branch": self.branch,
            "path": self.path,
            "watched_revision": self.watched_revision,
            "last_attempted_revision": self.last_attempted_revision,
            "last_applied_revision": self.last_applied_revision,
            "errors": list(self.errors),
            "backends": self.backends,
            "endpoints": self.endpoints,
            "notifications": self.notifications,
        }


def roll_up(facts: StatusFacts) -> AgentStatus:
    backends = {name: _backend(raw) for name, raw in (facts.cluster or {}).get("backends", {}).items()}
    endpoints = {name: _endpoint(raw) for name, raw in (facts.cluster or {}).get("endpoints", {}).items()}
    status, reason, message = _overall(facts, backends)
    return AgentStatus(
        status=status,
        conditions=_conditions(facts, status, reason, message),
        repo=facts.repo,
        branch=facts.branch,
        path=facts.path,
        watched_revision=facts.watched,
        last_attempted_revision=facts.applying or (facts.last_attempt.commit if facts.last_attempt else None),
        last_applied_revision=facts.last_applied.commit if facts.last_applied else None,
        errors=_errors(facts),
        backends=backends,
        endpoints=endpoints,
        notifications={name: dict(health) for name, health in (facts.notifications or {}).items()},
    )


def _overall(facts: StatusFacts, backends: Mapping[str, Mapping[str, Any]]) -> tuple[SyncStatus, str, str]:
    """The status with the Ready condition's reason and message."""
    last = facts.last_attempt
    if facts.suspended:
        return SyncStatus.SUSPENDED, "Suspended", "reconciliation is suspended"
    if facts.applying:
        return SyncStatus.PROGRESSING, "Progressing", f"applying {facts.applying[:7]} {facts.progress}".strip()
    if facts.git_error:
        return SyncStatus.FAILED, "GitOperationFailed", facts.git_error
    if facts.controller_error:
        return SyncStatus.FAILED, "ControllerUnavailable", facts.controller_error
    if last is None:
        return SyncStatus.PROGRESSING, "Progressing", "waiting for the first reconcile"
    if last.result is Outcome.INVALID:
        return SyncStatus.FAILED, "ValidationFailed", _failure_message(last)
    if last.result is Outcome.FAILED:
        return SyncStatus.FAILED, "ReconciliationFailed", _failure_message(last)
    if last.result is Outcome.SUPERSEDED:
        return SyncStatus.PROGRESSING, "Progressing", f"{last.commit[:7]} superseded by a newer commit"
    unhealthy = [f"{name}: {_health_problem(b)}" for name, b in sorted(backends.items()) if _health_problem(b)]
    if unhealthy:
        return SyncStatus.DEGRADED, "HealthCheckFailed", "; ".join(unhealthy)
    return SyncStatus.SYNCED, "ReconciliationSucceeded", f"applied revision {last.branch}@{last.commit[:7]}"


def _failure_message(entry: HistoryEntry) -> str:
    first = entry.errors[0] if entry.errors else "unknown error"
    more = f" (and {len(entry.errors) - 1} more)" if len(entry.errors) > 1 else ""
    return f"{entry.commit[:7]}: {first}{more}"


def _conditions(facts: StatusFacts, status: SyncStatus, reason: str, message: str) -> tuple[Condition, ...]:
    ready = status is SyncStatus.SYNCED
    conditions = [Condition("Ready", ready, reason, message)]
    if status is SyncStatus.PROGRESSING:
        conditions.append(Condition("Reconciling", True, "Progressing", message))
    if reason == "ValidationFailed":
        # Retrying the same commit cannot help: only a new commit can.
        conditions.append(Condition("Stalled", True, reason, message))
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


def _backend(raw: Mapping[str, Any]) -> dict[str, Any]:
    replicas = raw.get("replicas", [])
    version = raw.get("version")
    return {
        "version": version,
        "target_replicas": raw.get("target_replicas", 0),
        "ready": sum(1 for r in replicas if r.get("state") == "RUNNING" and r.get("version") == version),
        "replicas": dict(Counter(str(r.get("state")) for r in replicas)),
        "versions": dict(Counter(str(r.get("version")) for r in replicas)),
        "restarts": dict(raw.get("restarts", {})),
        "last_error": raw.get("last_error") or None,
    }


def _health_problem(backend: Mapping[str, Any]) -> str:
    if backend["ready"] < backend["target_replicas"]:
        detail = f": {backend['last_error']}" if backend["last_error"] else ""
        return f"{backend['ready']}/{backend['target_replicas']} replicas ready{detail}"
    return ""


def _endpoint(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {"route": raw.get("route"), "traffic": dict(raw.get("traffic", {})), "shadow": dict(raw.get("shadow", {}))}
