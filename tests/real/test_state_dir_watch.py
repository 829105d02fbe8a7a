"""Writes inside the state dir never wake the agent: only a ref that moves does.

The state dir usually lies inside the watched repository's working tree
(`.gitops-state/`), and the agent writes to it on every reconcile (history,
exports); were those writes to trigger a reconcile, the agent would wake
itself forever.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from gitops.loop import statedir
from gitops.sources.watching import RefWatcher, is_ref_path
from tests.conftest import GitRepo
from tests.support.stack import eventually

pytestmark = pytest.mark.real


def test_state_dir_writes_wake_nothing_and_a_commit_wakes_the_watcher(repo: GitRepo) -> None:
    repo.write("deployments/a.toml", "")
    repo.commit("first")
    state = statedir.prepare(repo.root / ".gitops-state")
    wakes: list[float] = []
    lock = threading.Lock()

    def woke() -> None:
        with lock:
            wakes.append(time.monotonic())

    watcher = RefWatcher(repo.root / ".git", woke)
    watcher.start()
    try:
        for n in range(20):
            (state.root / f"export-{n}").mkdir()
            (state.root / f"export-{n}" / "app.py").write_text("x = 1\n")
            state.history.write_bytes(b"x" * n)
        committed_at = time.monotonic()
        repo.write("deployments/a.toml", "# changed\n")
        repo.commit("second")
        eventually(lambda: wakes, what="the commit woke the watcher")
    finally:
        watcher.stop()
    # inotify delivers events in order: a wake-up for the state dir writes
    # would have come before the commit's.
    assert min(wakes) >= committed_at


def test_no_path_in_the_state_dir_is_a_ref(tmp_path: Path) -> None:
    git_dir = tmp_path / ".git"
    for name in ("history.db", "exports/abc/refs/heads/main", "repos/1/refs/heads/main", "suspended"):
        assert not is_ref_path(git_dir, str(tmp_path / ".gitops-state" / name))
