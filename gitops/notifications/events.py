"""Which notification events one reconcile tick produces. Pure.

`events_for(previous, current)` compares two ticks' outcomes, given as plain
values (`TickOutcome`): the result the tick recorded for a commit, the sync
status after it and the git error, if any. A recorded result becomes its
event (applied, invalid, apply_failed, …); a status that comes back to
Synced from Degraded or Failed becomes `synced`; a git error that was not
there before becomes `git_unreachable`. The agent announces the rest
itself as they happen: a new commit `seen` (commit status pending) and
`applying` (running), and after a rollback (`rollback_events`) the commit
`rolled_back` and every other commit held back `commit_quarantined`; and an
`action` someone took through the admin API (sync, suspend, resume,
rollback, a window override), with its actor. Must not: do I/O, know providers or
keep state (the notifier keeps the previous outcome).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "EventKind", "CommitState", "PROGRESS_EVENTS", "TickOutcome", "Event", "events_for", "rollback_events", "describe",
    "headline",
]


class EventKind(str, enum.Enum):
    SEEN = "seen"  # a new commit noticed; it waits for its turn
    APPLYING = "applying"  # its changes are being applied
    APPLIED = "applied"
    INVALID = "invalid"
    APPLY_FAILED = "apply_failed"
    ROLLOUT_ABORTED = "rollout_aborted"
    ROLLED_BACK = "rolled_back"
    COMMIT_QUARANTINED = "commit_quarantined"
    SYNCED = "synced"
    GIT_UNREACHABLE = "git_unreachable"
    PROMOTED = "promoted"  # passed this environment's gates and moved to the next (gitops.delivery.gates)
    ACTION = "action"  # someone synced, suspended, resumed or rolled back through the admin API


class CommitState(str, enum.Enum):
    """What an event says about its commit, in forge-neutral words."""

    PENDING = "pending"  # noticed, not applied yet
    RUNNING = "running"  # being applied
    SUCCESS = "success"
    FAILURE = "failure"
    ERROR = "error"  # the commit was fine, something else went wrong


# A recorded result (history's `Outcome` values, and the rollout and
# rollback results) -> the event it announces. A noop is recorded only for a
# new commit: it is applied too (it runs now; its commit status is success).
# superseded says nothing: the newer commit will.
_RESULT_EVENTS = {
    "applied": EventKind.APPLIED,
    "noop": EventKind.APPLIED,
    "invalid": EventKind.INVALID,
    "unverified": EventKind.INVALID,  # --verify-commits refused it: a failed commit, with git's reason
    "failed": EventKind.APPLY_FAILED,
    "aborted": EventKind.ROLLOUT_ABORTED,
    "rolled_back": EventKind.ROLLED_BACK,
    "quarantined": EventKind.COMMIT_QUARANTINED,
    "promoted": EventKind.PROMOTED,
}

# A commit's way to its result: commit statuses want them, chat does not by default.
PROGRESS_EVENTS = frozenset({EventKind.SEEN, EventKind.APPLYING})

_COMMIT_STATES = {
    EventKind.SEEN: CommitState.PENDING,
    EventKind.APPLYING: CommitState.RUNNING,
    EventKind.APPLIED: CommitState.SUCCESS,
    EventKind.SYNCED: CommitState.SUCCESS,
    EventKind.INVALID: CommitState.FAILURE,
    EventKind.APPLY_FAILED: CommitState.FAILURE,
    EventKind.ROLLOUT_ABORTED: CommitState.FAILURE,
    EventKind.ROLLED_BACK: CommitState.FAILURE,
    EventKind.COMMIT_QUARANTINED: CommitState.ERROR,
    EventKind.PROMOTED: CommitState.SUCCESS,
}

_UNHEALTHY = frozenset({"Degraded", "Failed"})


@dataclass(frozen=True)
class TickOutcome:
    """What one tick came to, in plain values.

    `result` is set only when the tick recorded an attempt (a new commit, a
    change made, a new failure); `commit` is that attempt's commit, else the
    newest commit known.
    """

    commit: str | None
    branch: str
    status: str
    result: str | None = None
    errors: tuple[str, ...] = ()
    git_error: str | None = None


@dataclass(frozen=True)
class Event:
    kind: EventKind
    commit: str | None
    branch: str
    status: str
    errors: tuple[str, ...] = ()
    actor: str = ""  # who asked, for an action (a token's name or an OIDC subject)

    @property
    def commit_state(self) -> CommitState | None:
        """None when the event says nothing about a commit (git unreachable)."""
        return _COMMIT_STATES.get(self.kind) if self.commit else None

    def to_json(self) -> dict[str, object]:
        return {
            "event": self.kind.value,
            "commit": self.commit,
            "branch": self.branch,
            "status": self.status,
            "errors": list(self.errors),
            "actor": self.actor or None,
            "message": describe(self),
        }


def events_for(previous: TickOutcome | None, current: TickOutcome) -> tuple[Event, ...]:
    """The events `current` announces, given the tick before it (None at start)."""
    events: list[Event] = []
    kind = _RESULT_EVENTS.get(current.result or "")
    if kind is not None:
        events.append(Event(kind, current.commit, current.branch, current.status, current.errors))
    if previous is not None and previous.status in _UNHEALTHY and current.status == "Synced":
        events.append(Event(EventKind.SYNCED, current.commit, current.branch, current.status))
    if current.git_error and not (previous and previous.git_error):
        events.append(
            Event(EventKind.GIT_UNREACHABLE, None, current.branch, current.status, (current.git_error,))
        )
    return tuple(events)


def rollback_events(
    reverted: str, good: str, held: frozenset[str], reason: str, branch: str, status: str
) -> tuple[Event, ...]:
    """`reverted` rolled back to `good` (and held back), and each other held commit quarantined."""
    back = (f"back to {good[:7]} ({reason}); not applied again until a newer commit",)
    events = [Event(EventKind.ROLLED_BACK, reverted, branch, status, back)]
    events += [
        Event(EventKind.COMMIT_QUARANTINED, sha, branch, status, (f"held back with {reverted[:7]} ({reason})",))
        for sha in sorted(held - {reverted})
    ]
    return tuple(events)


_SAYS = {
    EventKind.SEEN: "noticed, waiting to be applied",
    EventKind.APPLYING: "applying",
    EventKind.APPLIED: "applied",
    EventKind.INVALID: "invalid, nothing changed",
    EventKind.APPLY_FAILED: "apply failed, the previous state keeps serving",
    EventKind.ROLLOUT_ABORTED: "rollout aborted, traffic sent back",
    EventKind.ROLLED_BACK: "rolled back",
    EventKind.COMMIT_QUARANTINED: "quarantined, not applied again until a newer commit",
    EventKind.SYNCED: "back to Synced",
    EventKind.GIT_UNREACHABLE: "git unreachable",
    EventKind.PROMOTED: "promoted",
    EventKind.ACTION: "action",
}


def headline(event: Event) -> str:
    """What happened, with the first error: a commit status's description."""
    text = _SAYS[event.kind]
    if event.errors:
        more = len(event.errors) - 1
        text += f": {event.errors[0]}" + (f" (and {more} more)" if more else "")
    return text


def describe(event: Event) -> str:
    """One line for people: which commit, what happened, the first error."""
    subject = f"{event.commit[:7]} on {event.branch}" if event.commit else f"branch {event.branch}"
    return f"{subject}: {headline(event)}"
