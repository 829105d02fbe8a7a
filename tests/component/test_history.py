"""The history ledger in its SQLite file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from gitops.loop.history import _MIGRATIONS, SCHEMA_VERSION, History
from gitops.reconcile.outcomes import HistoryEntry, Outcome


def entry(commit: str, result: Outcome, errors: tuple[str, ...] = ()) -> HistoryEntry:
    return HistoryEntry(
        commit=commit, branch="main", author_time=100.0, summary=f"commit {commit}", started_at=200.0,
        finished_at=201.5, result=result, plan_summary="Plan: 1 to create, 0 to update, 0 to delete.",
        actions=1, errors=errors,
    )


def test_entries_come_back_newest_first_with_every_field(tmp_path: Path) -> None:
    history = History(tmp_path / "history.db")
    history.record(entry("a", Outcome.APPLIED))
    history.record(entry("b", Outcome.INVALID, ("deployments/x.toml:2:1: unknown key 'foo'",)))
    newest, oldest = history.recent()
    assert (newest.commit, oldest.commit) == ("b", "a")
    assert newest.errors == ("deployments/x.toml:2:1: unknown key 'foo'",)
    assert newest.duration_s == 1.5 and newest.summary == "commit b"


def test_ledger_survives_a_restart_of_the_agent(tmp_path: Path) -> None:
    History(tmp_path / "history.db").record(entry("a", Outcome.APPLIED))
    reopened = History(tmp_path / "history.db")
    assert [e.commit for e in reopened.recent()] == ["a"]


def test_last_applied_skips_failed_and_invalid_attempts(tmp_path: Path) -> None:
    history = History(tmp_path / "history.db")
    history.record(entry("a", Outcome.APPLIED))
    history.record(entry("b", Outcome.FAILED, ("boom",)))
    history.record(entry("c", Outcome.INVALID, ("bad",)))
    assert history.last_applied().commit == "a"
    assert history.last().commit == "c"


def test_empty_ledger_has_no_last_entry(tmp_path: Path) -> None:
    history = History(tmp_path / "state" / "history.db")
    assert history.last() is None and history.last_applied() is None and history.recent() == []


def test_json_form_has_result_duration_and_errors(tmp_path: Path) -> None:
    recorded = History(tmp_path / "h.db").record(entry("a", Outcome.FAILED, ("x",)))
    data = recorded.to_json()
    assert (data["result"], data["duration_s"], data["errors"], data["id"]) == ("failed", 1.5, ["x"], 1)


def test_only_the_newest_attempts_are_kept_but_never_the_last_applied_one(tmp_path: Path) -> None:
    history = History(tmp_path / "history.db", keep=3)
    history.record(entry("a", Outcome.APPLIED))
    for commit in "bcde":
        history.record(entry(commit, Outcome.INVALID, ("bad",)))
    assert [e.commit for e in history.recent()] == ["e", "d", "c", "a"]
    assert history.last_applied().commit == "a"


def test_a_version_1_ledger_is_migrated_so_older_agents_refuse_its_step_rows(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    with sqlite3.connect(path) as db:  # what the previous release wrote: schema 1
        db.execute(_MIGRATIONS[0])
        db.execute("PRAGMA user_version = 1")
    history = History(path)
    history.record(entry("a", Outcome.APPLIED))
    history.record(entry("a", Outcome.STEP))
    assert [e.result for e in history.recent()] == [Outcome.STEP, Outcome.APPLIED]
    history.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5


def test_a_version_3_ledger_gains_the_audit_trail_and_keeps_its_rows(tmp_path: Path) -> None:
    from gitops.reconcile.outcomes import Action

    path = tmp_path / "history.db"
    with sqlite3.connect(path) as db:
        for statement in _MIGRATIONS[:3]:
            db.execute(statement)
        db.execute("PRAGMA user_version = 3")
    History(path).record(entry("a", Outcome.APPLIED))
    history = History(path)
    history.record_action(Action(at=1.0, actor="otto", via="token", peer="127.0.0.1", verb="suspend"))
    assert [e.commit for e in history.recent()] == ["a"]
    assert [(a.actor, a.verb) for a in history.actions()] == [("otto", "suspend")]
    assert history.actions(actor="nobody") == []


def test_a_version_4_ledger_gains_the_ejections_and_keeps_its_rows(tmp_path: Path) -> None:
    from gitops.reconcile.outcomes import Action, Ejection

    path = tmp_path / "history.db"
    with sqlite3.connect(path) as db:
        for statement in _MIGRATIONS[:4]:
            db.execute(statement)
        db.execute("PRAGMA user_version = 4")
    old = History(path)
    old.record(entry("a", Outcome.APPLIED))
    old.record_action(Action(at=1.0, actor="otto", via="token", peer="127.0.0.1", verb="suspend"))
    old.close()
    history = History(path, keep=2)
    for count in (1, 2, 3):
        history.record_ejection(Ejection(at=float(count), backend="chat", replica_id="r-3", count=count,
                                         reason="5 consecutive errors", back_in_s=30.0 * count))
    assert [(e.count, e.back_in_s) for e in history.ejections()] == [(3, 90.0), (2, 60.0)]  # the newest `keep`
    assert history.ejections(1)[0].id is not None
    assert [e.commit for e in history.recent()] == ["a"] and len(history.actions()) == 1
    assert history.last().result is Outcome.APPLIED  # an ejection is no attempt: status and rollbacks read those
