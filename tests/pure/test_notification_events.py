"""Which events a tick announces (`gitops.notifications.events`)."""

from __future__ import annotations

import pytest

from gitops.notifications.events import Event, EventKind, TickOutcome, describe, events_for

SHA = "3f2a9c1" + "0" * 33


def outcome(**fields: object) -> TickOutcome:
    return TickOutcome(**{"commit": SHA, "branch": "main", "status": "Synced", **fields})  # type: ignore[arg-type]  # fields of any type, on purpose


@pytest.mark.parametrize(
    "result, kind",
    [
        ("applied", EventKind.APPLIED),
        ("noop", EventKind.APPLIED),  # recorded for a new commit that changes nothing: it runs now
        ("invalid", EventKind.INVALID),
        ("unverified", EventKind.INVALID),  # --verify-commits refused the commit
        ("failed", EventKind.APPLY_FAILED),
        ("aborted", EventKind.ROLLOUT_ABORTED),
        ("rolled_back", EventKind.ROLLED_BACK),
        ("quarantined", EventKind.COMMIT_QUARANTINED),
    ],
)
def test_a_recorded_result_announces_its_event(result: str, kind: EventKind) -> None:
    (event,) = events_for(outcome(), outcome(result=result, status="Failed", errors=("a.toml:1:1: bad",)))
    assert (event.kind, event.commit, event.errors) == (kind, SHA, ("a.toml:1:1: bad",))


@pytest.mark.parametrize("result", [None, "superseded"])
def test_a_tick_that_recorded_nothing_worth_telling_announces_nothing(result: str | None) -> None:
    assert events_for(outcome(), outcome(result=result)) == ()


@pytest.mark.parametrize("before", ["Failed", "Degraded"])
def test_coming_back_to_synced_from_a_failure_announces_synced(before: str) -> None:
    events = events_for(outcome(status=before), outcome(status="Synced"))
    assert [event.kind for event in events] == [EventKind.SYNCED]


@pytest.mark.parametrize("before", ["Progressing", "Synced", "Suspended"])
def test_synced_after_a_healthy_status_is_not_news(before: str) -> None:
    assert events_for(outcome(status=before), outcome(status="Synced")) == ()


def test_the_first_tick_never_announces_synced() -> None:
    assert [event.kind for event in events_for(None, outcome(result="applied"))] == [EventKind.APPLIED]


def test_a_new_git_error_announces_git_unreachable_once() -> None:
    failing = outcome(status="Failed", git_error="git fetch origin: connection refused")
    (event,) = events_for(outcome(), failing)
    assert (event.kind, event.commit, event.errors) == (
        EventKind.GIT_UNREACHABLE, None, ("git fetch origin: connection refused",)
    )
    assert events_for(failing, failing) == ()


def test_an_event_without_a_commit_says_nothing_about_a_commit() -> None:
    assert Event(EventKind.GIT_UNREACHABLE, None, "main", "Failed").commit_state is None


def test_describe_names_the_commit_the_outcome_and_the_first_error() -> None:
    event = Event(EventKind.INVALID, SHA, "main", "Failed", ("a.toml:3:1: x", "b.toml:1:1: y"))
    assert describe(event) == "3f2a9c1 on main: invalid, nothing changed: a.toml:3:1: x (and 1 more)"
