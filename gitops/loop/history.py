"""The history ledger: every attempted commit, in an embedded SQLite file.

Owns `<state-dir>/history.db`. One row per attempt: commit, author time,
apply start and end, result, plan summary, errors; one row per action
someone took through the admin API (`Action`: who, from where, why), the
audit trail, kept apart so that status, which reads the attempts, is not
changed by it (`record_action`, `actions`); and, apart too, one row per
replica a proxy ejected as an outlier (`Ejection`: `record_ejection`,
`ejections`). It survives agent and
Ray restarts, and it is the only thing a restarted agent reads from its
previous run (the last applied revision). It keeps the newest `keep`
attempts (and always the last applied one), so a long-lived agent's file
stays small. The file and its WAL/SHM are private to their user (0600),
and errors are stored redacted (`gitops.redaction`). Must not: decide what
to record; the agent calls `record` (and `record_ejection`) at the end of a tick.

The file carries its schema version in `PRAGMA user_version`; opening it
runs the migrations it has not had yet, each in one transaction, so an
upgraded agent reads a ledger written by an older one. A ledger of a newer
schema is refused with a readable error (`HistoryError`). Writes are
transactions in write-ahead-log mode: an agent killed mid-write leaves the
previous ledger intact.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from dataclasses import asdict, replace
from pathlib import Path
from typing import Iterator

from gitops.errors import UserError
from gitops.reconcile.outcomes import Action, Ejection, HistoryEntry, Outcome
from gitops.redaction import redact
from gitops.loop.statedir import private_file

__all__ = ["History", "HistoryError", "SCHEMA_VERSION"]

# Migration N takes the file from user_version N to N + 1. Version 0 is a
# new file or one written before schema versions (it already has the table,
# hence IF NOT EXISTS).
_MIGRATIONS: tuple[str, ...] = (
    """
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
""",
    # Version 2 brings rollout `step` rows, which an older agent cannot read:
    # the bump makes it refuse the file with its clear message instead. The
    # index serves `last_applied`, which filters on the result.
    "CREATE INDEX IF NOT EXISTS attempts_by_result ON attempts (result, id)",
    # Version 3 brings `promoted` and `window_override` rows (environments); the
    # index serves finding a commit's rows (its rollout evidence, its promotion).
    "CREATE INDEX IF NOT EXISTS attempts_by_commit ON attempts (commit_sha, id)",
    # Version 4 brings the audit trail: every action through the admin API, attributed.
    """
CREATE TABLE IF NOT EXISTS actions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    actor TEXT NOT NULL,
    via TEXT NOT NULL,
    peer TEXT NOT NULL,
    verb TEXT NOT NULL,
    detail TEXT NOT NULL,
    reason TEXT NOT NULL,
    result TEXT NOT NULL
)
""",
    # Version 5 brings the replicas proxies ejected as outliers, as the agent saw them.
    """
CREATE TABLE IF NOT EXISTS ejections (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    backend TEXT NOT NULL,
    replica_id TEXT NOT NULL,
    count INTEGER NOT NULL,
    reason TEXT NOT NULL,
    back_in_s REAL NOT NULL
)
""",
)
SCHEMA_VERSION = len(_MIGRATIONS)


class HistoryError(UserError):
    """The ledger file cannot be read by this version of the agent."""


class History:
    """The ledger file; safe to call from the agent's loop and the admin app."""

    def __init__(self, path: Path, keep: int = 10_000) -> None:
        # SQLite gives the WAL and SHM files the database file's mode.
        for private in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            private_file(private)
        self._keep = keep
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        _migrate(self._db, path)

    def record(self, entry: HistoryEntry) -> HistoryEntry:
        entry = replace(entry, errors=tuple(redact(error) for error in entry.errors))
        row = (
            entry.commit, entry.branch, entry.author_time, entry.summary, entry.started_at,
            entry.finished_at, entry.result.value, entry.plan_summary, entry.actions,
            json.dumps(list(entry.errors)),
        )
        with self._lock, _transaction(self._db):
            cursor = self._db.execute(
                "INSERT INTO attempts (commit_sha, branch, author_time, summary, started_at,"
                " finished_at, result, plan_summary, actions, errors)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )
            self._db.execute(
                "DELETE FROM attempts WHERE id <= ? AND id IS NOT ("
                " SELECT MAX(id) FROM attempts WHERE result IN ('applied', 'noop'))",
                ((cursor.lastrowid or 0) - self._keep,),  # an INSERT always sets lastrowid
            )
        return HistoryEntry(**{**asdict(entry), "errors": entry.errors, "id": cursor.lastrowid})

    def record_action(self, action: Action) -> Action:
        """One action of the audit trail, its text redacted; the newest `keep` are kept."""
        action = replace(action, detail=redact(action.detail), reason=redact(action.reason),
                         result=redact(action.result))
        row = (action.at, action.actor, action.via, action.peer, action.verb, action.detail, action.reason,
               action.result)
        with self._lock, _transaction(self._db):
            cursor = self._db.execute(
                "INSERT INTO actions (at, actor, via, peer, verb, detail, reason, result)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)
            self._db.execute("DELETE FROM actions WHERE id <= ?", ((cursor.lastrowid or 0) - self._keep,))
        return replace(action, id=cursor.lastrowid)

    def actions(self, limit: int = 50, actor: str | None = None, after: int = 0) -> list[Action]:
        """Newest first; only `actor`'s when given; only those after id `after`."""
        clause, params = "WHERE id > ?", list[int | str]([after])
        if actor is not None:
            clause += " AND actor = ?"
            params.append(actor)
        with self._lock:
            rows = self._db.execute(
                "SELECT id, at, actor, via, peer, verb, detail, reason, result FROM actions"
                f" {clause} ORDER BY id DESC LIMIT ?", (*params, limit)).fetchall()
        return [Action(at=at, actor=who, via=via, peer=peer, verb=verb, detail=detail, reason=reason,
                       result=result, id=id_)
                for (id_, at, who, via, peer, verb, detail, reason, result) in rows]

    def record_ejection(self, ejection: Ejection) -> Ejection:
        """One replica ejected as an outlier; the newest `keep` are kept."""
        row = (ejection.at, ejection.backend, ejection.replica_id, ejection.count, redact(ejection.reason),
               ejection.back_in_s)
        with self._lock, _transaction(self._db):
            cursor = self._db.execute(
                "INSERT INTO ejections (at, backend, replica_id, count, reason, back_in_s) VALUES (?, ?, ?, ?, ?, ?)",
                row)
            self._db.execute("DELETE FROM ejections WHERE id <= ?", ((cursor.lastrowid or 0) - self._keep,))
        return replace(ejection, reason=row[4], id=cursor.lastrowid)

    def ejections(self, limit: int = 50) -> list[Ejection]:
        """Newest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, at, backend, replica_id, count, reason, back_in_s FROM ejections ORDER BY id DESC LIMIT ?",
                (limit,)).fetchall()
        return [Ejection(at=at, backend=backend, replica_id=replica, count=count, reason=reason, back_in_s=back,
                         id=id_)
                for (id_, at, backend, replica, count, reason, back) in rows]

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


@contextlib.contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    """All of the block's writes or none of them."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _migrate(db: sqlite3.Connection, path: Path) -> None:
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        db.close()
        raise HistoryError(
            f"{path}: history schema {version} is newer than this gitops reads ({SCHEMA_VERSION}); "
            "upgrade gitops, or move the file away to start a new ledger (the cluster's state comes from git)"
        )
    for target in range(version + 1, SCHEMA_VERSION + 1):
        with _transaction(db):
            db.execute(_MIGRATIONS[target - 1])
            db.execute(f"PRAGMA user_version = {target}")


def _entry(row: tuple) -> HistoryEntry:
    (id_, commit, branch, author_time, summary, started, finished, result, plan_summary, actions, errors) = row
    return HistoryEntry(
        commit=commit, branch=branch, author_time=author_time, summary=summary,
        started_at=started, finished_at=finished, result=Outcome(result),
        plan_summary=plan_summary, actions=actions, errors=tuple(json.loads(errors)), id=id_,
    )
