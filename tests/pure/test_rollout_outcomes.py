"""A rollout the controller stopped marks the newest commit aborted, once, with its numbers."""

from __future__ import annotations

from gitops.reconcile.outcomes import HistoryEntry, Outcome
from gitops.status.rollouts import aborted_entry, rollout_message, rollouts_moved, step_entries
from vocabulary.control.rollouts import Check, CheckName, Rollout, RolloutPhase, StepRecord
from vocabulary.spec.rollout_config import RolloutConfig

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


PASSED_CHECK = Check(name=CheckName.REQUESTS, backend="v2", measured=25, threshold=20, passed=True)


def stepped(passed: int) -> Rollout:
    records = tuple(
        StepRecord(step=i, weights={"v1": 1 - share, "v2": share}, checks=(PASSED_CHECK,), at=10.0 + i)
        for i, share in enumerate((0.1, 0.5, 1.0)[:passed])
    )
    return rollout(RolloutPhase.STEPPING).model_copy(update={"step": passed, "passed": records})


def test_each_passed_step_is_one_row_of_the_applied_commit_with_its_weights_and_checks() -> None:
    rows = step_entries({"api": stepped(2)}, APPLIED, recent=[APPLIED])
    assert [(row.commit, row.result, row.finished_at) for row in rows] == [("c2", Outcome.STEP, 10.0), ("c2", Outcome.STEP, 11.0)]
    assert rows[1].plan_summary == "endpoint api: step 2/3 passed at v1 50%, v2 50%: v2: 25 requests >= 20"


def test_a_step_already_in_history_is_not_recorded_again() -> None:
    first = step_entries({"api": stepped(1)}, APPLIED, recent=[APPLIED])
    later = step_entries({"api": stepped(2)}, APPLIED, recent=[*first, APPLIED])
    assert [row.plan_summary.split(" passed")[0] for row in later] == ["endpoint api: step 2/3"]


def test_a_step_row_counts_as_a_good_commit_so_a_later_abort_is_still_recorded() -> None:
    (step,) = step_entries({"api": stepped(1)}, APPLIED, recent=[APPLIED])
    aborted = aborted_entry({"api": rollout(RolloutPhase.ABORTED)}, step, now=12.0)
    assert aborted is not None and aborted.result is Outcome.ABORTED and aborted.plan_summary == ""


def test_a_rollout_moved_when_it_passed_a_step_stopped_or_was_promoted_not_when_one_began() -> None:
    running = rollout(RolloutPhase.STEPPING)
    passed = StepRecord(step=0, weights={"v1": 0.9, "v2": 0.1}, checks=(), at=5.0)
    assert not rollouts_moved({}, {"api": running})  # a new one: its apply is being recorded already
    assert not rollouts_moved({"api": running}, {"api": running})
    assert rollouts_moved({"api": running}, {"api": running.model_copy(update={"passed": (passed,)})})
    assert rollouts_moved({"api": running}, {"api": rollout(RolloutPhase.ABORTED)})
    assert rollouts_moved({"api": running}, {"api": rollout(RolloutPhase.PROMOTED)})
