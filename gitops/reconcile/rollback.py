"""Rollback and quarantine: which commit's state the agent applies when the newest one is held back.

`gitops rollback [COMMIT]` (and `--auto-revert`, when an apply fails or a
rollout is aborted) picks a good commit, the last applied one before the
newest or the one given, and quarantines every commit attempted after it,
the head included. While a quarantine holds, the agent applies the good
commit's state instead of the head's; the first head that is not
quarantined (a commit newer than them) lifts it. The agent never writes to
git: the quarantine lives in the agent's state, beside its history.

Pure: rules over the history ledger (newest first) and the watched head.
Not here: reading the ledger, loading a commit, applying it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol, Sequence

__all__ = ["RollbackReason", "Quarantine", "RollbackRefused", "quarantine", "commit_to_apply", "auto_revert_reason"]


class RollbackReason(str, enum.Enum):
    """Why the agent rolled back (the `reason` label of `gitops_rollbacks_total`)."""

    ANALYSIS = "analysis"  # a rollout's check failed
    APPLY_FAILED = "apply_failed"  # a goal failed
    MANUAL = "manual"  # gitops rollback


class _Result(Protocol):
    @property
    def ok(self) -> bool: ...


class Attempt(Protocol):
    """A history entry as these rules read it."""

    @property
    def commit(self) -> str: ...

    @property
    def result(self) -> _Result: ...


@dataclass(frozen=True)
class Quarantine:
    """`good` is applied instead of any commit in `held`, until a head outside `held` arrives."""

    good: str
    held: frozenset[str]
    reason: RollbackReason
    detail: str = ""

    def holding(self) -> str:
        """Why a held commit is not applied, as its pending plan says: `quarantined: ...`."""
        cause = {
            RollbackReason.APPLY_FAILED: "auto-revert after a failed apply",
            RollbackReason.ANALYSIS: "auto-revert after an aborted rollout",
            RollbackReason.MANUAL: "rolled back by hand",
        }[self.reason]
        detail = self.detail if len(self.detail) <= 200 else self.detail[:199] + "…"
        detail = f" ({detail})" if detail else ""
        return f"quarantined: {cause}{detail}; {self.good[:7]} is applied instead until a newer commit arrives"

    def to_json(self) -> dict[str, object]:
        return {"good": self.good, "held": sorted(self.held), "reason": self.reason.value, "detail": self.detail}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Quarantine:
        held = data.get("held", [])
        return cls(
            good=str(data["good"]),
            held=frozenset(str(commit) for commit in held) if isinstance(held, list) else frozenset(),
            reason=RollbackReason(str(data["reason"])),
            detail=str(data.get("detail", "")),
        )


class RollbackRefused(ValueError):
    """No commit to roll back to; the message says why and what to do."""


def quarantine(
    ledger: Sequence[Attempt], head: str, reason: RollbackReason, requested: str | None = None, detail: str = ""
) -> Quarantine:
    """The quarantine a rollback sets up. `ledger` is the history, newest first.

    The good commit is `requested` (a full or abbreviated sha that was
    applied before) or the
    newest applied commit other than `head`. Every commit attempted after the
    good one's last successful attempt is held back, and `head` with them.
    """
    good_at = _good_index(ledger, head, requested)
    good = ledger[good_at].commit
    held = {entry.commit for entry in ledger[:good_at]} | {head}
    return Quarantine(good=good, held=frozenset(held - {good}), reason=reason, detail=detail)


def _good_index(ledger: Sequence[Attempt], head: str, requested: str | None) -> int:
    for index, entry in enumerate(ledger):
        if not entry.result.ok:
            continue
        if (requested is not None and entry.commit.startswith(requested)) or (
            requested is None and entry.commit != head
        ):
            return index
    if requested is not None:
        prefix = requested[:12]
        raise RollbackRefused(f"commit {prefix} was never applied here; `gitops history` lists the ones that were")
    raise RollbackRefused(f"no commit before {head[:12]} was applied here; there is nothing to roll back to")


def commit_to_apply(head: str, held: Quarantine | None) -> tuple[str, Quarantine | None]:
    """The commit whose state the agent applies for `head`, and the quarantine
    still in force (None once a head newer than the held commits arrives)."""
    if held is None or head not in held.held:
        return head, None
    return held.good, held


def auto_revert_reason(result: str) -> RollbackReason | None:
    """With --auto-revert: the reason an attempt's result calls for a rollback, if any."""
    return {"failed": RollbackReason.APPLY_FAILED, "aborted": RollbackReason.ANALYSIS}.get(result)
