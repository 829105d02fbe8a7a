"""Revisions as git reads them (issue 49 row 4): in an ordinary clone the
environment branches are `origin/env/*`, and every command taking a revision
(`gitops plan --from/--to`, `gitops validate --rev`) finds them by the
branch's own name, as `git checkout env/dev` does; with two remotes holding
the branch the error says which to type."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import GitRepo

SPEC = '''\
[backends.hello-v1]
import_path = "deployments.hello:Hello"
num_replicas = {replicas}

[endpoints.hello]
route = "/hello"
traffic = {{ hello-v1 = 1.0 }}
'''
APP = "class Hello:\n    def __call__(self, request):\n        return 'hi'\n"


def _gitops(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gitops", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A clone whose only branches for env/dev and env/staging are remote-tracking ones."""
    upstream = GitRepo(tmp_path / "upstream")
    upstream.write("deployments/__init__.py", "")
    upstream.write("deployments/hello.py", APP)
    upstream.write("deployments/hello.toml", SPEC.format(replicas=1))
    upstream.commit("one replica")
    upstream.git("branch", "env/dev")
    upstream.write("deployments/hello.toml", SPEC.format(replicas=2))
    upstream.commit("two replicas")
    upstream.git("branch", "env/staging")
    subprocess.run(["git", "clone", "-q", str(upstream.root), str(tmp_path / "clone")], check=True)
    clone = tmp_path / "clone"
    branches = subprocess.run(["git", "branch", "--list"], cwd=clone, capture_output=True, text=True).stdout
    assert "env/dev" not in branches  # the ordinary clone: only origin/env/dev
    return clone


def test_plan_reads_env_branches_of_an_ordinary_clone(clone: Path) -> None:
    done = _gitops(clone, "plan", "--from", "env/dev", "--to", "env/staging")
    assert done.returncode == 0, done.stderr
    assert "hello-v1" in done.stdout and "num_replicas" in done.stdout, done.stdout


def test_validate_rev_reads_the_same_branch(clone: Path) -> None:
    done = _gitops(clone, "validate", "--rev", "env/dev")
    assert done.returncode == 0, done.stderr
    assert "valid" in done.stdout


def test_two_remotes_holding_the_branch_get_did_you_mean(clone: Path) -> None:
    subprocess.run(["git", "remote", "add", "mirror", str(clone.parent / "upstream")], cwd=clone, check=True)
    subprocess.run(["git", "fetch", "-q", "mirror"], cwd=clone, check=True)
    done = _gitops(clone, "plan", "--to", "env/dev")
    assert done.returncode == 1
    assert "revision 'env/dev' not found" in done.stderr
    assert "did you mean mirror/env/dev or origin/env/dev?" in done.stderr, done.stderr
    # A full remote-tracking name is never ambiguous.
    assert _gitops(clone, "plan", "--to", "origin/env/dev").returncode == 0


def test_a_name_no_remote_has_gets_no_guess(clone: Path) -> None:
    done = _gitops(clone, "plan", "--to", "env/nowhere")
    assert done.returncode == 1
    assert "revision 'env/nowhere' not found" in done.stderr and "did you mean" not in done.stderr
