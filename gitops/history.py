"""The history ledger: every attempted commit, in an embedded SQLite file.

Owns `<state-dir>/history.db`. One row per attempt: commit, author time,
apply start and end, result, plan summary, errors. It survives agent and
Ray restarts, and it is the only thing a restarted agent reads from its
previous run (the last applied revision). It keeps the newest `keep`
attempts (and always the last applied one), so a long-lived agent's file
stays small. Must not: decide what to record; the agent calls `record` once
at the end of a tick.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gitops.ledger import HistoryEntry, Outcome

__all__ = ["History"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    commit_sha TEXT NOT NULL,
    branch TEXT NOT NULL,
    author_time REAL NOT NULL,
    summary TEXT NOT NULL,
    started_at REAL NOT NULL,
    finished_at REAL NOT NULL,
    result TEXT NOT NULL,
    plan_summary TEXT NOT NULL,
    actions INTEGER NOT NULL,
    errors TEXT NOT NULL
)
"""


class History:
    """The ledger file; safe to call from the agent's loop and the admin app."""

    def __init__(self, path: Path, keep: int = 10_000) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._keep = keep
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(_SCHEMA)

    def record(self, entry: HistoryEntry) -> HistoryEntry:
        row = (
            entry.commit, entry.branch, entry.author_time, entry.summary, entry.started_at,
            entry.finished_at, entry.result.value, entry.plan_summary, entry.actions,
            json.dumps(list(entry.errors)),
        )
        with self._lock:
            cursor = self._db.execute(
                "INSERT INTO attempts (commit_sha, branch, author_time, summary, started_at,"
                " finished_at, result, plan_summary, actions, errors)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )
            self._db.execute(
                "DELETE FROM attempts WHERE id <= ? AND id IS NOT ("
                " SELECT MAX(id) FROM attempts WHERE result IN ('applied', 'noop'))",
                (cursor.lastrowid - self._keep,),
            )
        return HistoryEntry(**{**asdict(entry), "errors": entry.errors, "id": cursor.lastrowid})

    def recent(self, limit: int = 50) -> list[HistoryEntry]:
        """Newest first."""
        return self._select("ORDER BY id DESC LIMIT ?", (limit,))

    def last(self) -> HistoryEntry | None:
        rows = self.recent(1)
        return rows[0] if rows else None

    def last_applied(self) -> HistoryEntry | None:
        """The newest attempt whose state is what the cluster runs."""
        rows = self._select("WHERE result IN (?, ?) ORDER BY id DESC LIMIT 1", ("applied", "noop"))
        return rows[0] if rows else None

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _select(self, clause: str, params: tuple) -> list[HistoryEntry]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id, commit_sha, branch, author_time, summary, started_at, finished_at,"
                f" result, plan_summary, actions, errors FROM attempts {clause}",
                params,
            ).fetchall()
        return [_entry(row) for row in rows]


def _entry(row: tuple) -> HistoryEntry:
    (id_, commit, branch, author_time, summary, started, finished, result, plan_summary, actions, errors) = row
    return HistoryEntry(
        commit=commit, branch=branch, author_time=author_time, summary=summary,
        started_at=started, finished_at=finished, result=Outcome(result),
        plan_summary=plan_summary, actions=actions, errors=tuple(json.loads(errors)), id=id_,
    )
