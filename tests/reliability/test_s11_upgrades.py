"""Scenario 11: upgrades keep their state.

A controller checkpoint written by the previous release (a stored fixture,
schema 2) is migrated and served from; a checkpoint of a newer, unknown
schema gives a readable error naming the documented reset, and the reset
works. `history.db` carries `PRAGMA user_version`, and a ledger written
before it had one is migrated with its rows.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import ray
from ray.experimental import internal_kv

from controller.client import discard_checkpoint
from gitops.loop.history import History, HistoryError
from tests.support.faults import leftover_actors
from tests.support.results import ScenarioResult, record
from tests.support.stack import APPS, eventually, run, start_controller

FIXTURES = Path(__file__).parent / "fixtures"
CHECKPOINT_KEY = "gitops-controller-checkpoint"


def _store_checkpoint(namespace: str, data: bytes) -> None:
    internal_kv._internal_kv_put(CHECKPOINT_KEY, data, overwrite=True, namespace=namespace)


def test_a_checkpoint_of_the_previous_schema_is_migrated_and_served(ray_session: str) -> None:
    namespace = f"{ray_session}-upgrade-{uuid.uuid4().hex[:6]}"
    fixture = (FIXTURES / "checkpoint-schema-2.json").read_text().replace("@APPS@", APPS)
    _store_checkpoint(namespace, fixture.encode())
    client = start_controller(namespace)
    try:
        state = run(client.get_state())
        eventually(
            lambda: [r.state for r in run(client.get_status()).backends["echo"].replicas] == ["RUNNING"] * 2,
            60, what="the checkpoint's two replicas running again",
        )
        assert set(state.backends) == {"echo"} and set(state.endpoints) == {"echo"}
    finally:
        client.shutdown()
    record(ScenarioResult("11", "upgrade: previous checkpoint schema and history.db migrated", 0, 0, None,
                          len(leftover_actors(namespace)), note="no load: state only"))


def test_a_checkpoint_of_a_newer_schema_names_the_reset_and_the_reset_works(ray_session: str) -> None:
    namespace = f"{ray_session}-newer-{uuid.uuid4().hex[:6]}"
    _store_checkpoint(namespace, b'{"schema": 999, "written_at": 0, "body": {}}')
    with pytest.raises(Exception) as refused:
        start_controller(namespace)
    message = str(refused.value)
    assert "schema 999" in message and "gitops reset-controller" in message
    assert "Traceback" not in message
    discard_checkpoint(namespace)
    client = start_controller(namespace)
    try:
        assert run(client.get_state()).backends == {}
    finally:
        client.shutdown()


def _stored_checkpoint(namespace: str) -> bytes | None:
    return internal_kv._internal_kv_get(CHECKPOINT_KEY, namespace=namespace)


def test_reset_controller_discards_only_its_own_namespace_checkpoint(ray_session: str) -> None:
    reset, kept = (f"{ray_session}-reset-{which}-{uuid.uuid4().hex[:6]}" for which in ("a", "b"))
    for namespace in (reset, kept):
        _store_checkpoint(namespace, b'{"schema": 999, "written_at": 0, "body": {}}')
    address = ray.get_runtime_context().gcs_address
    done = subprocess.run(
        [sys.executable, "-m", "gitops", "reset-controller", "--ray-address", address, "--namespace", reset],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"discarded the controller's checkpoint in Ray namespace '{reset}'" in done.stdout
    assert _stored_checkpoint(reset) is None and _stored_checkpoint(kept) is not None
    internal_kv._internal_kv_del(CHECKPOINT_KEY, namespace=kept)


def _user_version(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return int(db.execute("PRAGMA user_version").fetchone()[0])


def test_history_db_carries_a_schema_version_and_write_ahead_logging(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    History(path).close()
    with sqlite3.connect(path) as db:
        mode = db.execute("PRAGMA journal_mode").fetchone()[0]
    assert _user_version(path) >= 1 and mode == "wal"


def test_a_history_db_from_before_schema_versions_is_migrated_with_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    shutil.copy(FIXTURES / "history-before-user-version.db", path)
    history = History(path)
    try:
        entries = history.recent(10)
        assert [e.summary for e in entries] == ["broken spec", "first: serve /echo"]
        assert history.last_applied().commit == "a" * 40  # type: ignore[union-attr]  # None fails the assertion anyway
    finally:
        history.close()
    assert _user_version(path) >= 1


def test_a_history_db_of_a_newer_schema_is_refused_with_a_readable_error(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 99")
    with pytest.raises(HistoryError, match="history schema 99 is newer than this gitops reads"):
        History(path)
