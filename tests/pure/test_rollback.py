"""Rollback and quarantine over the history ledger: which commit's state is applied, and until when."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import pytest

from gitops.reconcile.rollback import Quarantine, RollbackReason, RollbackRefused, auto_revert_reason, commit_to_apply, quarantine


class Result(str, enum.Enum):
    APPLIED = "applied"
    NOOP = "noop"
    INVALID = "invalid"
    FAILED = "failed"

    @property
    def ok(self) -> bool:
        return self in (Result.APPLIED, Result.NOOP)


@dataclass(frozen=True)
class Entry:
    commit: str
    result: Result


# Newest first: c4 failed, c3 was applied, c2 invalid, c1 applied.
LEDGER = [Entry("c4", Result.FAILED), Entry("c3", Result.APPLIED), Entry("c2", Result.INVALID), Entry("c1", Result.APPLIED)]


def test_after_a_failed_apply_the_last_applied_commit_is_good_and_the_head_is_held() -> None:
    held = quarantine(LEDGER, head="c4", reason=RollbackReason.APPLY_FAILED)
    assert (held.good, held.held) == ("c3", frozenset({"c4"}))


def test_a_manual_rollback_goes_back_past_the_applied_head() -> None:
    held = quarantine(LEDGER[1:], head="c3", reason=RollbackReason.MANUAL)
    assert (held.good, held.held) == ("c1", frozenset({"c3", "c2"}))


def test_a_requested_commit_may_be_abbreviated() -> None:
    ledger = [Entry("c3" + "a" * 38, Result.APPLIED), Entry("c1" + "b" * 38, Result.APPLIED)]
    held = quarantine(ledger, head=ledger[0].commit, reason=RollbackReason.MANUAL, requested="c1bbbbb")
    assert (held.good, held.held) == (ledger[1].commit, frozenset({ledger[0].commit}))


def test_a_head_not_yet_in_the_ledger_is_held_too() -> None:
    assert "c5" in quarantine(LEDGER, head="c5", reason=RollbackReason.MANUAL).held


@pytest.mark.parametrize(
    ("ledger", "requested", "message"),
    [
        (LEDGER, "c2", "commit c2 was never applied here"),
        ([Entry("c1", Result.APPLIED)], None, "no commit before c1 was applied here"),
    ],
)
def test_a_rollback_without_a_good_commit_is_refused_with_the_reason(
    ledger: list[Entry], requested: str | None, message: str
) -> None:
    with pytest.raises(RollbackRefused, match=message):
        quarantine(ledger, head="c1", reason=RollbackReason.MANUAL, requested=requested)


@pytest.mark.parametrize(("head", "applied"), [("c4", "c3"), ("c3", "c3")])
def test_a_held_head_gets_the_good_commit_s_state(head: str, applied: str) -> None:
    held = Quarantine(good="c3", held=frozenset({"c4"}), reason=RollbackReason.MANUAL)
    assert commit_to_apply(head, held)[0] == applied


def test_a_head_newer_than_the_held_commits_lifts_the_quarantine() -> None:
    held = Quarantine(good="c3", held=frozenset({"c4"}), reason=RollbackReason.MANUAL)
    assert commit_to_apply("c4", held) == ("c3", held)
    assert commit_to_apply("c5", held) == ("c5", None)


def test_a_quarantine_survives_a_json_round_trip() -> None:
    held = Quarantine(good="c3", held=frozenset({"c4", "c5"}), reason=RollbackReason.ANALYSIS, detail="v2: error_ratio")
    assert Quarantine.from_json(held.to_json()) == held


@pytest.mark.parametrize(
    ("result", "reason"),
    [("failed", RollbackReason.APPLY_FAILED), ("aborted", RollbackReason.ANALYSIS), ("invalid", None), ("applied", None)],
)
def test_auto_revert_follows_failed_applies_and_aborted_rollouts_only(result: str, reason: RollbackReason | None) -> None:
    assert auto_revert_reason(result) == reason
