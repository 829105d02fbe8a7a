"""The state dir is private and ignored by git, wherever --state-dir puts it."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import pytest

from gitops.loop import statedir
from gitops.loop.history import History


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_state_dir_is_created_0700(tmp_path: Path) -> None:
    state = statedir.prepare(tmp_path / "a" / ".gitops-state")
    assert _mode(state.root) == 0o700


def test_an_existing_state_dir_is_tightened_to_0700(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir(mode=0o755)
    assert _mode(statedir.prepare(tmp_path / "state").root) == 0o700


def test_history_database_is_0600_also_once_written(tmp_path: Path) -> None:
    state = statedir.prepare(tmp_path / "state")
    History(state.history)
    with sqlite3.connect(state.history) as db:
        db.execute("CREATE TABLE IF NOT EXISTS probe (x)")
    assert _mode(state.history) == 0o600


def test_git_status_never_shows_the_state_dir(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    state = statedir.prepare(tmp_path / ".gitops-state")
    (state.root / "exports" / "abc").mkdir(parents=True)
    (state.root / "exports" / "abc" / "app.py").write_text("x = 1\n")
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"], cwd=tmp_path, capture_output=True, text=True
    )
    assert status.stdout == ""



def test_a_relative_state_dir_is_handed_out_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    state = statedir.prepare(Path(".gitops-state"))
    assert state.root == tmp_path / ".gitops-state" and state.history.is_absolute()
