"""The trees under `gitops validate`: real commits read with gitpython, git's own hashes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gitops.errors import UserError
from gitops.sources.trees import CommitTree, DirectoryTree, resolve_revision
from gitops.specs.loading import Loader
from tests.conftest import GitRepo
from tests.real.test_validate_cli import APP, SPEC

pytestmark = pytest.mark.real


@pytest.fixture
def echo_repo(repo: GitRepo) -> GitRepo:
    repo.write("deployments/apps/echo.py", APP)
    repo.write("deployments/echo.toml", SPEC)
    repo.write("deployments/apps/data/words.txt", "a b c\n")
    repo.write("bin/run.sh", "#!/bin/sh\necho hi\n")
    os.chmod(repo.root / "bin/run.sh", 0o755)
    os.symlink("apps/echo.py", repo.root / "deployments/link.py")
    repo.commit("echo")
    return repo


@pytest.mark.parametrize("path", ["", "deployments", "deployments/apps", "deployments/apps/echo.py", "bin"])
def test_a_clean_checkout_hashes_like_its_commit(echo_repo: GitRepo, path: str) -> None:
    assert DirectoryTree(echo_repo.root).hash(path) == CommitTree(echo_repo.root).hash(path)


def test_the_tree_hash_is_gits_own(echo_repo: GitRepo) -> None:
    assert CommitTree(echo_repo.root).hash("deployments") == echo_repo.git("rev-parse", "HEAD:deployments")


def test_a_commit_tree_lists_and_reads_the_commit(echo_repo: GitRepo) -> None:
    tree = CommitTree(echo_repo.root)
    echo_repo.write("deployments/extra.toml", "uncommitted")
    assert "deployments/extra.toml" not in tree.files("deployments")
    assert tree.read("deployments/echo.toml").decode() == SPEC


def test_loading_a_commit_gives_the_same_state_as_its_checkout(echo_repo: GitRepo) -> None:
    from_commit = Loader().load_commit(echo_repo.root)
    from_directory = Loader().load_directory(echo_repo.root / "deployments")
    assert from_commit.ok and from_commit.state == from_directory.state


def test_reloading_an_unchanged_commit_is_served_from_the_cache(echo_repo: GitRepo) -> None:
    loader = Loader()
    first = loader.load_commit(echo_repo.root)
    echo_repo.write("README.md", "docs only")
    echo_repo.commit("docs")
    assert loader.load_commit(echo_repo.root) is first


def test_a_commit_changing_code_changes_the_version(echo_repo: GitRepo) -> None:
    loader = Loader()
    before = loader.load_commit(echo_repo.root).state
    echo_repo.write("deployments/apps/echo.py", APP + "\n# a change to the code\n")
    echo_repo.commit("the code changes")
    after = loader.load_commit(echo_repo.root).state
    assert before is not None and after is not None
    assert before.backends["echo-v1"].version != after.backends["echo-v1"].version


def test_a_data_file_under_the_spec_path_is_not_code(echo_repo: GitRepo) -> None:
    """Under the spec path only Python files are code (docs/reference/spec.md, `code_paths`): a data file
    beside them, like the spec files themselves, changes no version and restarts nothing."""
    loader = Loader()
    before = loader.load_commit(echo_repo.root).state
    echo_repo.write("deployments/apps/data/words.txt", "a b c d\n")
    echo_repo.commit("more words")
    after = loader.load_commit(echo_repo.root).state
    assert before is not None and after is not None
    assert before.backends["echo-v1"].version == after.backends["echo-v1"].version


def test_resolve_revision_gives_the_full_sha(echo_repo: GitRepo) -> None:
    assert resolve_revision(echo_repo.root, "main") == echo_repo.head()


def test_a_path_that_is_not_a_repository_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="is not inside a git repository"):
        Loader().load_commit(tmp_path)
