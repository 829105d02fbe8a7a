"""`validate`, `plan` and `init` find the repository's top level from any subdirectory, as git does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import GitRepo
from tests.real.test_validate_cli import APP, SPEC

pytestmark = pytest.mark.real


def gitops(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gitops", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60)


@pytest.fixture
def echo_repo(repo: GitRepo) -> GitRepo:
    repo.write("deployments/apps/echo.py", APP)
    repo.write("deployments/echo.toml", SPEC)
    repo.commit("echo")
    return repo


@pytest.mark.parametrize("subdir", ["", "deployments", "deployments/apps"])
def test_validate_without_a_path_validates_the_repositorys_deployments_from_anywhere_in_it(
    echo_repo: GitRepo, subdir: str
) -> None:
    done = gitops("validate", cwd=echo_repo.root / subdir)
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("\ndeployments: 1 backend, 1 endpoint, valid\n")


def test_validate_with_a_path_takes_it_from_the_current_directory(echo_repo: GitRepo) -> None:
    done = gitops("validate", ".", cwd=echo_repo.root / "deployments")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("subdir", ["deployments", "deployments/apps"])
def test_plan_from_a_subdirectory_plans_the_repositorys_spec_path(echo_repo: GitRepo, subdir: str) -> None:
    done = gitops("plan", cwd=echo_repo.root / subdir)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "Plan: 2 to create, 0 to update, 0 to delete."


def test_init_in_a_subdirectory_scaffolds_at_the_top_level(repo: GitRepo) -> None:
    (repo.root / "docs").mkdir()
    done = gitops("init", cwd=repo.root / "docs")
    assert done.returncode == 0, done.stderr
    assert (repo.root / "deployments/hello.toml").is_file()
    assert not (repo.root / "docs/deployments").exists()
    assert gitops("validate", cwd=repo.root / "docs").returncode == 0
