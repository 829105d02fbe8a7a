"""What one reconcile of a commit came to: `Outcome`, and `HistoryEntry`, the
row the history ledger keeps of it; `Action`, its row of a call someone
made through the admin API (who, from where, why, what came of it); and
`Ejection`, its row of a replica a proxy ejected as an outlier.

Plain values shared by the agent, its status, metrics, rollbacks and the
admin API; `gitops.loop.history` stores them in SQLite. Pure: no storage, no clock.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any

from gitops.errors import ErrorKind

__all__ = ["Outcome", "HistoryEntry", "Action", "Ejection", "MAX_REASON_CHARS"]

MAX_REASON_CHARS = 500  # an action's `--reason`; longer is refused


class Outcome(str, enum.Enum):
    """What one reconcile of a commit came to."""

    APPLIED = "applied"  # the plan ran and every goal was met
    NOOP = "noop"  # nothing to change
    INVALID = "invalid"  # the specs have errors; nothing was touched
    FAILED = "failed"  # an action or goal failed; the rest was not applied
    SUPERSEDED = "superseded"  # a newer commit arrived mid-apply
    UNVERIFIED = "unverified"  # --verify-commits: unsigned or untrusted; nothing was touched
    ABORTED = "aborted"  # applied, then a rollout check failed: traffic went back (or paused)
    STEP = "step"  # applied, and one of its rollout steps passed its checks
    PROMOTED = "promoted"  # served here, passed the gates, moved to the next environment (gitops.delivery.gates)
    WINDOW_OVERRIDE = "window_override"  # applied during a sync window by `gitops sync --override-window`

    @property
    def ok(self) -> bool:
        return self in (Outcome.APPLIED, Outcome.NOOP, Outcome.STEP)

    @property
    def error_kind(self) -> ErrorKind | None:
        """What can help a failed commit: only a new commit (invalid), or a retry (failed)."""
        return {
            Outcome.INVALID: ErrorKind.STALLED,
            Outcome.UNVERIFIED: ErrorKind.STALLED,
            Outcome.FAILED: ErrorKind.RETRY,
        }.get(self)


@dataclass(frozen=True)
class HistoryEntry:
    commit: str
    branch: str
    author_time: float
    summary: str
    started_at: float
    finished_at: float
    result: Outcome
    plan_summary: str = ""
    actions: int = 0
    errors: tuple[str, ...] = ()
    id: int | None = field(default=None, compare=False)

    @property
    def duration_s(self) -> float:
        return self.finished_at - self.started_at

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["result"] = self.result.value
        data["errors"] = list(self.errors)
        data["duration_s"] = round(self.duration_s, 3)
        return data


@dataclass(frozen=True)
class Action:
    """One call that changes the agent (sync, suspend, resume, rollback, a window
    override), attributed: `actor` is a token's name or an OIDC subject (never a
    token), `via` how it was known (token, oidc, loopback), `peer` the caller's
    address, `reason` what the caller said, `result` what came of it."""

    at: float
    actor: str
    via: str
    peer: str
    verb: str
    detail: str = ""
    reason: str = ""
    result: str = "accepted"
    id: int | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """One line for people: `rollback (to abc1234) by otto from 127.0.0.1: reason`."""
        what = self.verb + (f" ({self.detail})" if self.detail else "")
        text = f"{what} by {self.actor} from {self.peer or 'an unknown address'}"
        if self.result != "accepted":
            text += f", {self.result}"
        return text + (f": {self.reason}" if self.reason else "")


@dataclass(frozen=True)
class Ejection:
    """A replica a proxy took out of routing as an outlier ([endpoints.X.outliers]), as the agent first saw
    it in the controller's status: `at` (wall clock), its backend, its ejections so far (`count`, this one
    included), why, and for how long it was out when seen (`back_in_s`)."""

    at: float
    backend: str
    replica_id: str
    count: int
    reason: str
    back_in_s: float = 0.0
    id: int | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """`replica r-3 of backend chat ejected (ejection 2): 5 consecutive errors, out for 60 s`."""
        times = "" if self.count == 1 else f" (ejection {self.count})"
        return (f"replica {self.replica_id} of backend {self.backend} ejected{times}: {self.reason}, "
                f"out for {max(0, round(self.back_in_s))} s")
