"""One reconcile tick as a value, and what is written from it.

A tick of `gitops.loop.agent.Agent` produces one frozen `TickReport`: what woke
it, the revision fetched, the load result, the plan, the apply result (the
failed action as data, not text), the observed `ClusterStatus`, and its
errors, each with its stage and `ErrorKind`. From that one value, once per
tick, come:

- `history_entry(report)`: the ledger row the tick amounts to, if any;
- `write_metrics(metrics, report)`: every agent metric the tick moves;
- `log_line(report, recorded)`: the one line it prints, with its fields;
- `notification_outcome(report, …)`: what the notifier is told.

`progress_line` is the line of one `Progress` step during a long apply.
Pure: no clock, no git, no controller; the agent owns those and the writes'
targets (ledger, registry, logger).
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gitops.reconcile.applying import ApplyResult, Progress
from gitops.errors import ErrorKind
from gitops.reconcile.outcomes import HistoryEntry, Outcome
from gitops.loop.metrics import AgentMetrics
from gitops.notifications.events import TickOutcome
from gitops.reconcile.plans import Plan
from gitops.sources.source import Revision
from vocabulary.spec.state import ServingState
from vocabulary.control.status import ClusterStatus

if TYPE_CHECKING:  # the loader reads git; a report only holds its result
    from gitops.specs.loading import LoadResult

__all__ = [
    "Trigger",
    "FULL_TRIGGERS",
    "Stage",
    "TickError",
    "TickReport",
    "LogLine",
    "history_entry",
    "write_metrics",
    "log_line",
    "notification_outcome",
    "reconcile_event",
    "progress_line",
]

Fields = dict[str, Any]


class Trigger(str, enum.Enum):
    START = "start"
    POLL = "poll"
    WATCH = "watch"
    WEBHOOK = "webhook"
    SYNC = "sync"
    RESYNC = "resync"
    RETRY = "retry"  # the backoff after a transient error


# These compare with the cluster even when the commit is unchanged: that is
# how drift is found, and how a tick cut short by a transient error is redone.
FULL_TRIGGERS = frozenset({Trigger.START, Trigger.SYNC, Trigger.RESYNC, Trigger.RETRY})


class Stage(str, enum.Enum):
    """Where in a tick an error happened."""

    FETCH = "fetch"  # the newest revision of the source
    LOAD = "load"  # the specs of that revision
    CONTROLLER = "controller"  # reading the controller's state or status
    APPLY = "apply"  # an action or its goal
    TICK = "tick"  # an unexpected error anywhere in the tick


# Errors that stop a tick before it decides anything about the commit.
_STOPPING = (Stage.FETCH, Stage.CONTROLLER, Stage.TICK)


@dataclass(frozen=True)
class TickError:
    stage: Stage
    kind: ErrorKind
    message: str
    reason: str = ""  # a status reason of its own (e.g. GitUnreachable), if the error has one


@dataclass(frozen=True)
class TickReport:
    """Everything one tick learned and did; built once, never changed."""

    triggers: frozenset[Trigger]
    full: bool  # compare with the cluster even if the commit is unchanged
    started_at: float  # wall clock
    duration_s: float = 0.0
    revision: Revision | None = None  # the newest revision, if the fetch worked
    held_head: str | None = None  # the head a rollback holds back: `revision` is the good commit instead
    attempted: bool = False  # the revision was reconciled (new, or a full tick)
    applied_before: str | None = None  # the commit last applied when the tick began
    loaded: LoadResult | None = None
    actual: ServingState | None = None  # what the plan was made against
    plan: Plan | None = None
    working_dir: str | None = None  # the revision's export, when backends needed one
    applied: ApplyResult | None = None
    reconciled_at: float | None = None  # wall clock when the outcome was known
    observed: ClusterStatus | None = None
    errors: tuple[TickError, ...] = ()

    def error(self, *stages: Stage) -> str | None:
        """The first error of `stages`, or None."""
        return next((e.message for e in self.errors if e.stage in stages), None)

    def reason(self, *stages: Stage) -> str:
        """The status reason of the first error of `stages`, or ""."""
        return next((e.reason for e in self.errors if e.stage in stages), "")

    @property
    def stopped_by(self) -> TickError | None:
        """The error that kept the tick from an outcome (git, controller, a bug), if any."""
        if self.outcome is not None:
            return None
        return next((e for e in self.errors if e.stage in _STOPPING), None)

    @property
    def error_kind(self) -> ErrorKind | None:
        """What can help the tick's failure: its stopping error's kind, else its outcome's
        (None when nothing failed)."""
        stopped = self.stopped_by
        if stopped is not None:
            return stopped.kind
        return self.outcome.error_kind if self.outcome is not None else None

    @property
    def outcome(self) -> Outcome | None:
        """What the reconcile of the revision came to; None if there was none."""
        if self.attempted and self.revision is not None and self.revision.unverified:
            return Outcome.UNVERIFIED
        if not self.attempted or self.loaded is None:
            return None
        if not self.loaded.ok or self.loaded.state is None:
            return Outcome.INVALID
        if self.plan is None:
            return None  # the controller could not be read
        if not self.plan:
            return Outcome.NOOP
        return None if self.applied is None else Outcome(self.applied.outcome.value)

    @property
    def drift(self) -> bool:
        """The tick changed the cluster back to the commit it had already applied."""
        return bool(self.plan) and self.revision is not None and self.applied_before == self.revision.sha

    def exports_in_use(self) -> list[str | None] | None:
        """The exports the old and new configs point at; None if the controller was not read."""
        if self.actual is None:
            return None
        return [b.working_dir for b in self.actual.backends.values()] + [self.working_dir]


# --- the ledger ---------------------------------------------------------------------


def history_entry(report: TickReport) -> HistoryEntry | None:
    """The ledger row of the tick's outcome (recorded or not: see the agent)."""
    outcome, revision = report.outcome, report.revision
    if outcome is None or revision is None:
        return None
    plan = report.plan
    return HistoryEntry(
        commit=revision.sha,
        branch=revision.branch,
        author_time=revision.author_time,
        summary=revision.summary,
        started_at=report.started_at,
        finished_at=report.reconciled_at if report.reconciled_at is not None else report.started_at,
        result=outcome,
        plan_summary=_rolled_back(report) + (plan.summary().text() if plan else "No changes."),
        actions=len(plan) if plan else 0,
        errors=_entry_errors(report, outcome),
    )


def _rolled_back(report: TickReport) -> str:
    """A rollback's re-apply says so: "rolled back to 1a2b3c4 (holding 5d6e7f8): "."""
    if report.held_head is None or report.revision is None:
        return ""
    return f"rolled back to {report.revision.sha[:7]} (holding {report.held_head[:7]}): "


def _entry_errors(report: TickReport, outcome: Outcome) -> tuple[str, ...]:
    revision = report.revision
    if outcome is Outcome.UNVERIFIED and revision is not None and revision.verification is not None:
        return (revision.verification.message(revision.sha),)
    if outcome is Outcome.INVALID and report.loaded is not None:
        return tuple(str(error) for error in report.loaded.errors)
    if report.applied is not None and report.applied.error:
        return (report.applied.error,)
    return ()


# --- metrics ------------------------------------------------------------------------

_METRIC_RESULT = {
    Outcome.APPLIED: "success",
    Outcome.NOOP: "noop",
    Outcome.INVALID: "failure",
    Outcome.FAILED: "failure",
    Outcome.UNVERIFIED: "failure",
}


def write_metrics(metrics: AgentMetrics, report: TickReport) -> None:
    """Every metric one tick moves (the sync status follows the agent's status)."""
    if report.error(Stage.FETCH) is not None:
        metrics.git_fetch("failure")
    elif report.revision is not None:
        metrics.git_fetch("success")
    if report.attempted and report.revision is not None and report.revision.verification is not None:
        metrics.commit_verified(report.revision.verification.verdict.value)
    if report.loaded is not None:
        metrics.spec_errors(len(report.loaded.errors))
    if report.drift and report.plan:
        for _ in report.plan.actions:
            metrics.drift_corrected()
    for goal in report.applied.goals if report.applied else ():
        metrics.goal_finished(goal.kind.value, goal.seconds)
    outcome, revision = report.outcome, report.revision
    if outcome is not None and outcome.ok and revision is not None:
        metrics.commit_applied(revision.sha, revision.branch, revision.commit_time)
    if report.observed is not None:
        metrics.cluster_observed(report.observed)
    # A superseded apply is neither success nor failure: the next tick reconciles the newer commit.
    if outcome is not None and outcome is not Outcome.SUPERSEDED:
        metrics.reconcile_finished(_METRIC_RESULT[outcome], report.duration_s)
    elif outcome is None and report.stopped_by is not None:
        metrics.reconcile_finished("failure", report.duration_s)


# --- notifications -----------------------------------------------------------------


def notification_outcome(
    report: TickReport, recorded: HistoryEntry | None, status: str, watched: str | None, branch: str
) -> TickOutcome:
    """The tick in the notifier's plain values: a result only for a recorded attempt."""
    entry = history_entry(report)
    was_recorded = recorded is not None and recorded.id is not None
    return TickOutcome(
        commit=entry.commit if entry else watched,
        branch=branch,
        status=status,
        result=recorded.result.value if was_recorded and recorded else None,
        errors=recorded.errors if was_recorded and recorded else (),
        git_error=report.error(Stage.FETCH),
    )


# --- the log line -------------------------------------------------------------------


@dataclass(frozen=True)
class LogLine:
    level: int
    text: str
    fields: Fields


def log_line(report: TickReport, recorded: HistoryEntry | None) -> LogLine | None:
    """The tick's line: a recorded attempt (`result` says how it went; the look
    stays calm), or the error that stopped it; None for a quiet tick."""
    if recorded is not None and recorded.id is not None:
        text, fields = reconcile_event(report, recorded)
        return LogLine(logging.INFO, text, fields)
    stopped = report.stopped_by
    if stopped is not None:
        return LogLine(logging.ERROR, stopped.message, {"result": "error"})
    return None


def reconcile_event(report: TickReport, entry: HistoryEntry) -> tuple[str, Fields]:
    """The one line a reconcile prints, and its fields.

    `commit`, `result` and `duration_s` always; `plan` and `actions` when it
    changed something; `errors` when it failed; `backend` when one backend
    is concerned (the one whose action failed, or the only one changed),
    else `backends` when several are.
    """
    commit = entry.commit[:7]
    duration_s = report.duration_s
    text = f"{commit} {entry.result.value} in {duration_s:.2f}s"
    fields: Fields = {"commit": commit, "result": entry.result.value, "duration_s": round(duration_s, 3)}
    if entry.actions:
        text += f" — {entry.plan_summary}"
        fields.update(plan=entry.plan_summary, actions=entry.actions)
    fields.update(_backend_fields(_concerned_backends(report)))
    if entry.errors:
        fields["errors"] = list(entry.errors)
    return text, fields


def _concerned_backends(report: TickReport) -> list[str]:
    failed = report.applied.failed_action if report.applied else None
    if failed is not None and failed.kind.is_backend:
        return [failed.name]
    return sorted({a.name for a in (report.plan.actions if report.plan else ()) if a.kind.is_backend})


def progress_line(commit: str, progress: Progress) -> tuple[str, Fields]:
    """A "waiting for …" / "… done in" line of a long apply, with its backend(s)."""
    return f"{commit} … {progress.text()}", {"commit": commit, **_backend_fields(progress.backends())}


def _backend_fields(names: list[str]) -> Fields:
    if len(names) == 1:
        return {"backend": names[0]}
    return {"backends": names} if names else {}
