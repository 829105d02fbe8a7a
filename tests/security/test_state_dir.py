"""The state dir is private and held by one agent (issue 11 rows 10 and 14).

(The dir's own 0700 is tests/component/test_statedir.py's.)

Real files, a real git repository, the real CLI (it stops at the lock,
before Ray starts).
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from gitops.cli import main
from gitops.loop.history import History
from gitops.loop.statedir import lock, prepare, private_file
from gitops.sources.repos import GitSource
from tests.conftest import GitRepo


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_history_db_and_its_wal_and_shm_are_private(tmp_path: Path) -> None:
    History(tmp_path / "history.db")
    for name in ("history.db", "history.db-wal", "history.db-shm"):
        assert mode(tmp_path / name) == 0o600, name


def test_a_file_left_world_readable_by_an_older_agent_is_made_private(tmp_path: Path) -> None:
    marker = tmp_path / "suspended"
    marker.touch(mode=0o644)
    marker.chmod(0o644)
    assert mode(private_file(marker)) == 0o600


def test_a_second_gitops_run_on_a_held_state_dir_exits_1_with_one_line(
    tmp_path: Path, repo: GitRepo, capsys: pytest.CaptureFixture[str]
) -> None:
    repo.write("deployments/empty.toml", "")
    repo.commit()
    held = lock(prepare(tmp_path / "state").root)
    try:
        code = main(["run", "--repo", str(repo.root), "--state-dir", str(tmp_path / "state"), "--admin-port", "0"])
    finally:
        held.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert len(err) == 1 and "is in use by gitops run" in err[0] and "--state-dir" in err[0], err


def test_exports_a_crashed_run_left_half_made_are_removed_at_start(tmp_path: Path, repo: GitRepo) -> None:
    repo.write("deployments/empty.toml", "")
    repo.commit()
    exports = tmp_path / "state" / "exports"
    source = GitSource(str(repo.root), None, tmp_path / "state")
    (exports / ".export-crashed1").mkdir()
    (exports / ".export-crashed1" / "app.py").write_text("half")
    assert source.discard_unfinished_exports() == [".export-crashed1"]
    assert list(exports.iterdir()) == []
