"""What the controller's rollouts mean for the history ledger and the status.

A rollout the controller stopped (aborted, or paused on a failed check)
belongs to the commit whose split it was moving to: git's current split for
that endpoint, so the newest applied commit. `step_entries` gives that
commit one `step` row per step passed (its weights and checks), each once;
`aborted_entry` turns a stopped rollout into one ledger row, `aborted`, with the failed checks and their measured values,
recorded once; the commit is not retried (the controller keeps the aborted
target and ignores it when asked again). `rollout_message` is what the
status says while rollouts run; `rollouts_moved` says whether a rollout passed a
step or stopped between two readings of the controller (the agent then
records it at once instead of at its next poll).

Pure: rollouts and ledger rows in, a row or a line of text out.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Mapping

from gitops.reconcile.outcomes import HistoryEntry, Outcome
from vocabulary.control.rollouts import Rollout, RolloutPhase

__all__ = ["STOPPED", "stopped", "step_entries", "aborted_entry", "rollout_message", "rollouts_moved"]

STOPPED = frozenset({RolloutPhase.ABORTED, RolloutPhase.PAUSED})


def stopped(rollouts: Mapping[str, Rollout]) -> list[Rollout]:
    """Rollouts a failed check stopped, by endpoint name."""
    return [rollouts[name] for name in sorted(rollouts) if rollouts[name].phase in STOPPED]


def step_entries(
    rollouts: Mapping[str, Rollout], applied: HistoryEntry | None, recent: Iterable[HistoryEntry]
) -> list[HistoryEntry]:
    """A `step` row of the applied commit for each step passed that `recent` rows do not hold yet."""
    if applied is None:
        return []
    known = {entry.plan_summary for entry in recent if entry.commit == applied.commit and entry.result is Outcome.STEP}
    rows = []
    for name in sorted(rollouts):
        rollout = rollouts[name]
        for record in rollout.passed:
            text = record.describe(name, len(rollout.config.steps))
            if text not in known:
                rows.append(replace(
                    applied, result=Outcome.STEP, started_at=record.at, finished_at=record.at,
                    plan_summary=text, actions=0, errors=(), id=None,
                ))
    return rows


def aborted_entry(rollouts: Mapping[str, Rollout], last: HistoryEntry | None, now: float) -> HistoryEntry | None:
    """The `aborted` row for the newest commit, once, when a rollout of it stopped."""
    failed = stopped(rollouts)
    if not failed or last is None or not last.result.ok:
        return None
    # A step row's summary is that step's; the abort keeps only the apply's.
    summary = "" if last.result is Outcome.STEP else last.plan_summary
    return replace(
        last, result=Outcome.ABORTED, started_at=now, finished_at=now, plan_summary=summary,
        errors=tuple(rollout.message() for rollout in failed), id=None,
    )


def rollout_message(rollouts: Mapping[str, Rollout]) -> str:
    """The steps of the rollouts under way, for the status while they run; "" when none runs."""
    return "; ".join(
        rollouts[name].message() for name in sorted(rollouts) if rollouts[name].phase is RolloutPhase.STEPPING
    )


def rollouts_moved(before: Mapping[str, Rollout], after: Mapping[str, Rollout]) -> bool:
    """Whether a rollout passed a step, stopped or was promoted between two readings (a new one is no move:
    its apply is already being recorded)."""
    def where(rollouts: Mapping[str, Rollout]) -> dict[str, tuple[RolloutPhase, int]]:
        return {name: (rollout.phase, len(rollout.passed)) for name, rollout in rollouts.items()}

    then, now = where(before), where(after)
    return any(name in then and then[name] != state for name, state in now.items())
