"""A rollout the controller stopped marks the newest commit aborted, once, with its numbers."""

from __future__ import annotations

from vocabulary.configs import RolloutConfig
from vocabulary.rollouts import Check, CheckName, Rollout, RolloutPhase
from gitops.ledger import HistoryEntry, Outcome
from gitops.rollout_outcomes import aborted_entry, rollout_message

APPLIED = HistoryEntry(commit="c2", branch="main", author_time=1.0, summary="canary", started_at=2.0,
                       finished_at=3.0, result=Outcome.APPLIED, plan_summary="1 to update", actions=1)
FAILED_CHECK = Check(name=CheckName.ERROR_RATIO, backend="v2", measured=0.2, threshold=0.01, passed=False)


def rollout(phase: RolloutPhase) -> Rollout:
    return Rollout(endpoint="api", before={"v1": 1.0}, target={"v2": 1.0}, config=RolloutConfig(), phase=phase,
                   step_started_at=0.0, checks=(FAILED_CHECK,) if phase is not RolloutPhase.STEPPING else ())


def test_an_aborted_rollout_marks_the_newest_applied_commit_aborted_with_the_numbers() -> None:
    entry = aborted_entry({"api": rollout(RolloutPhase.ABORTED)}, APPLIED, now=9.0)
    assert entry is not None and (entry.commit, entry.result, entry.finished_at) == ("c2", Outcome.ABORTED, 9.0)
    assert entry.errors == ("endpoint api: aborted at step 1/3, traffic back: v2: error_ratio 0.2 > 0.01",)


def test_a_paused_rollout_is_recorded_too() -> None:
    entry = aborted_entry({"api": rollout(RolloutPhase.PAUSED)}, APPLIED, now=9.0)
    assert entry is not None and "paused at step 1/3" in entry.errors[0]


def test_the_abort_is_recorded_once() -> None:
    first = aborted_entry({"api": rollout(RolloutPhase.ABORTED)}, APPLIED, now=9.0)
    assert aborted_entry({"api": rollout(RolloutPhase.ABORTED)}, first, now=10.0) is None


def test_running_or_promoted_rollouts_record_nothing() -> None:
    for phase in (RolloutPhase.STEPPING, RolloutPhase.PROMOTED):
        assert aborted_entry({"api": rollout(phase)}, APPLIED, now=9.0) is None


def test_the_status_shows_the_step_of_each_rollout_under_way() -> None:
    assert rollout_message({"api": rollout(RolloutPhase.STEPPING)}) == "endpoint api: step 1/3 (10% of the change)"
    assert rollout_message({"api": rollout(RolloutPhase.PROMOTED)}) == ""
