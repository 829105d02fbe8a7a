"""`gitops validate` as a user runs it: a subprocess on real git repositories."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import GitRepo

pytestmark = pytest.mark.real

PROJECT = Path(__file__).resolve().parents[2]

APP = """\
class Echo:
    def __init__(self, label):
        self.label = label

    def __call__(self, request):
        return self.label
"""

SPEC = """\
[backends.echo-v1]
import_path = "deployments.apps.echo:Echo"
init_args = ["v1"]

[endpoints.echo]
route = "/echo"
traffic = { echo-v1 = 1.0 }
"""

BROKEN = SPEC.replace('init_args = ["v1"]', 'init_args = ["v1"]\nnum_replicas = "2"').replace(
    "echo-v1 = 1.0", "echo-v1 = 0.5"
)


def gitops(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    return subprocess.run(
        [sys.executable, "-m", "gitops", "validate", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60,
    )


@pytest.fixture
def echo_repo(repo: GitRepo) -> GitRepo:
    repo.write("deployments/apps/echo.py", APP)
    repo.write("deployments/echo.toml", SPEC)
    repo.commit("echo")
    return repo


def test_a_valid_tree_exits_0_with_a_summary(echo_repo: GitRepo) -> None:
    done = gitops(cwd=echo_repo.root)
    assert (done.returncode, done.stdout.splitlines()[-1], done.stderr) == (0, "deployments: 1 backend, 1 endpoint, valid", "")
    assert done.stdout.startswith("Checked:\n  specs:        1 file")


def test_an_invalid_tree_exits_1_with_every_error_on_stderr(echo_repo: GitRepo) -> None:
    echo_repo.write("deployments/echo.toml", BROKEN)
    done = gitops(cwd=echo_repo.root)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        'deployments/echo.toml:4:16: backends.echo-v1.num_replicas: must be an integer (got \'2\')',
        "deployments/echo.toml:8:1: endpoints.echo.traffic: weights sum to 0.5, not 1",
    ]
    assert done.stdout == "deployments: 2 errors, invalid\n"


def test_a_path_that_does_not_exist_is_a_usage_error(echo_repo: GitRepo) -> None:
    done = gitops("specs", cwd=echo_repo.root)
    assert (done.returncode, done.stderr) == (2, "gitops validate: specs does not exist\n")


def test_rev_validates_the_commit_not_the_working_tree(echo_repo: GitRepo) -> None:
    echo_repo.write("deployments/echo.toml", BROKEN)
    assert gitops("--rev", "HEAD", cwd=echo_repo.root).returncode == 0
    echo_repo.commit("break it")
    assert gitops("--rev", "HEAD", cwd=echo_repo.root).returncode == 1
    assert gitops("--rev", "HEAD~1", cwd=echo_repo.root).returncode == 0


def test_rev_sees_code_missing_from_the_commit(echo_repo: GitRepo) -> None:
    echo_repo.remove("deployments/apps/echo.py")
    echo_repo.commit("drop the code")
    echo_repo.write("deployments/apps/echo.py", APP)  # back in the working tree only
    done = gitops("--rev", "HEAD", cwd=echo_repo.root)
    assert done.returncode == 1
    assert "module 'deployments.apps.echo' not found" in done.stderr


def test_an_unknown_rev_is_a_one_line_usage_error(echo_repo: GitRepo) -> None:
    done = gitops("--rev", "no-such-branch", cwd=echo_repo.root)
    assert done.returncode == 2
    assert done.stderr.startswith("gitops validate: revision 'no-such-branch' not found")
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr


def test_imports_resolve_from_the_git_top_level_wherever_it_runs(echo_repo: GitRepo) -> None:
    done = gitops(str(echo_repo.root / "deployments"), cwd=echo_repo.root / "deployments" / "apps")
    assert done.returncode == 0, done.stderr


def test_root_sets_where_imports_resolve_outside_git(tmp_path: Path) -> None:
    (tmp_path / "deployments" / "apps").mkdir(parents=True)
    (tmp_path / "deployments" / "apps" / "echo.py").write_text(APP)
    (tmp_path / "deployments" / "echo.toml").write_text(SPEC)
    done = gitops(str(tmp_path / "deployments"), "--root", str(tmp_path), cwd=PROJECT)
    assert done.returncode == 0, done.stderr


def test_the_projects_own_deployments_validate() -> None:
    done = gitops(cwd=PROJECT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith(", valid\n")
