"""Git sources on real repositories: newest revision, force-push, exports, ref watch."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from gitops.errors import SourceError
from gitops.sources.repos import GitSource
from gitops.sources.watching import RefWatcher, is_ref_path

pytestmark = pytest.mark.real


def test_newest_revision_is_the_branch_head(repo, tmp_path: Path) -> None:
    repo.write("deployments/a.toml", "")
    first = repo.commit("first")
    source = GitSource(str(repo.root), None, tmp_path / "state")
    assert (source.branch, source.newest().sha) == ("main", first)
    second = repo.commit("second")
    newest = source.newest()
    assert (newest.sha, newest.summary, newest.author) == (second, "second", "tests")


def test_uncommitted_edits_are_not_seen(repo, tmp_path: Path) -> None:
    repo.write("app.py", "committed = True\n")
    repo.commit()
    source = GitSource(str(repo.root), None, tmp_path / "state")
    repo.write("app.py", "committed = False\n")
    export = source.export(source.newest())
    assert (export / "app.py").read_text() == "committed = True\n"


def test_url_is_cloned_into_the_cache_and_fetched(repo, tmp_path: Path) -> None:
    repo.write("a.txt", "1")
    repo.commit()
    source = GitSource(f"file://{repo.root}", None, tmp_path / "state")
    assert source.remote and source.branch == "main"
    assert source.newest().sha == repo.head()
    assert tmp_path / "state" in source.path.parents
    head = repo.commit("more")
    assert source.newest().sha == head


def test_force_push_makes_the_rewritten_head_the_truth(repo, tmp_path: Path) -> None:
    repo.write("a.txt", "1")
    repo.commit("one")
    repo.write("a.txt", "2")
    repo.commit("two")
    source = GitSource(f"file://{repo.root}", "main", tmp_path / "state")
    source.newest()
    repo.git("reset", "-q", "--hard", "HEAD~1")
    repo.write("a.txt", "3")
    rewritten = repo.commit("rewritten")
    assert source.newest().sha == rewritten


def test_export_has_the_tree_without_git_and_is_shared_by_equal_trees(repo, tmp_path: Path) -> None:
    repo.write("deployments/apps/echo.py", "X = 1\n")
    first = repo.commit()
    source = GitSource(str(repo.root), None, tmp_path / "state")
    rev_a = source.newest()
    repo.commit("empty commit, same tree")
    rev_b = source.newest()
    assert rev_a.sha == first and rev_a.sha != rev_b.sha
    export = source.export(rev_a)
    assert export.name == rev_a.tree and source.export(rev_b) == export
    assert (export / "deployments/apps/echo.py").read_text() == "X = 1\n"
    assert not (export / ".git").exists()


def test_prune_removes_exports_no_backend_uses(repo, tmp_path: Path) -> None:
    repo.write("a.txt", "1")
    repo.commit()
    source = GitSource(str(repo.root), None, tmp_path / "state")
    old = source.export(source.newest())
    repo.write("a.txt", "2")
    repo.commit()
    new = source.export(source.newest())
    assert source.prune_exports([str(new)]) == [old.name]
    assert new.is_dir() and not old.exists()


def test_missing_repository_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="not a git repository"):
        GitSource(str(tmp_path / "nowhere"), None, tmp_path / "state")


def test_missing_branch_is_a_clear_error(repo, tmp_path: Path) -> None:
    repo.commit()
    with pytest.raises(SourceError, match="branch 'nope' not found"):
        GitSource(str(repo.root), "nope", tmp_path / "state").newest()


def test_unreachable_url_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=str(tmp_path / "gone")):
        GitSource(f"file://{tmp_path / 'gone'}", "main", tmp_path / "state").newest()


def test_ref_watch_notices_a_commit_at_once(repo, tmp_path: Path) -> None:
    repo.commit()
    source = GitSource(str(repo.root), None, tmp_path / "state")
    seen = threading.Event()
    watcher = RefWatcher(source.refs_dir, seen.set)
    watcher.start()
    try:
        time.sleep(0.1)  # the observer's inotify watches are being added
        seen.clear()
        repo.commit("noticed")
        assert seen.wait(timeout=5)
    finally:
        watcher.stop()


@pytest.mark.parametrize(
    ("relative", "is_ref"),
    [("refs/heads/main", True), ("packed-refs", True), ("HEAD", True), ("refs/heads/main.lock", False),
     ("objects/ab/cdef", False), ("index", False)],
)
def test_only_ref_files_count_as_ref_changes(tmp_path: Path, relative: str, is_ref: bool) -> None:
    assert is_ref_path(tmp_path, str(tmp_path / relative)) is is_ref
