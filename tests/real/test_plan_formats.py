"""`gitops plan --exit-code` and `--format markdown` on a real repository: exact outputs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gitops.specs.loading import Loader
from tests.conftest import GitRepo

pytestmark = pytest.mark.real

PROJECT = Path(__file__).resolve().parents[2]

APP = ('class Echo:\n    def __init__(self, word="hello"):\n        self.word = word\n\n'
       '    def __call__(self, request):\n        return self.word\n')
BEFORE = """\
[backends.echo-v1]
import_path = "deployments.apps.echo:Echo"

[backends.echo-v2]
import_path = "deployments.apps.echo:Echo"
init_args = ["a"]

[endpoints.echo]
route = "/echo"
traffic = { echo-v1 = 1.0 }
"""
# echo-v1 changes in place, echo-v2 restarts (new init_args), echo-v3 is new.
AFTER = """\
[backends.echo-v1]
import_path = "deployments.apps.echo:Echo"
max_concurrent_queries = 10

[backends.echo-v2]
import_path = "deployments.apps.echo:Echo"
init_args = ["b"]

[backends.echo-v3]
import_path = "deployments.apps.echo:Echo"

[endpoints.echo]
route = "/echo"
traffic = { echo-v1 = 0.5, echo-v3 = 0.5 }
"""


def plan(repo: GitRepo, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gitops", "plan", "--repo", str(repo.root), *args],
        cwd=PROJECT, capture_output=True, text=True, timeout=60,
    )


def commit(repo: GitRepo, specs: str) -> str:
    repo.write("deployments/apps/echo.py", APP)
    repo.write("deployments/echo.toml", specs)
    return repo.commit("specs")


def version(repo: GitRepo, rev: str, backend: str) -> str:
    return Loader().load_commit(repo.root, rev=rev).state.backends[backend].version


def test_exit_code_is_2_when_the_plan_changes_something(repo: GitRepo) -> None:
    before = commit(repo, BEFORE)
    commit(repo, AFTER)
    done = plan(repo, "--from", before, "--exit-code")
    assert (done.returncode, done.stdout.splitlines()[-1]) == (2, "Plan: 1 to create, 3 to update (1 restart), 0 to delete.")


def test_exit_code_is_0_when_nothing_changes(repo: GitRepo) -> None:
    head = commit(repo, BEFORE)
    done = plan(repo, "--from", head, "--exit-code")
    assert (done.returncode, done.stdout) == (0, "No changes.\n")


def test_exit_code_is_1_for_spec_errors(repo: GitRepo) -> None:
    before = commit(repo, BEFORE)
    commit(repo, BEFORE.replace("echo-v1 = 1.0", "echo-v1 = 0.5"))
    assert plan(repo, "--from", before, "--exit-code").returncode == 1


def test_without_exit_code_a_plan_with_changes_exits_0(repo: GitRepo) -> None:
    before = commit(repo, BEFORE)
    commit(repo, AFTER)
    assert plan(repo, "--from", before).returncode == 0


def test_markdown_is_a_pull_request_comment_with_summary_and_marked_actions(repo: GitRepo) -> None:
    before = commit(repo, BEFORE)
    after = commit(repo, AFTER)
    done = plan(repo, "--from", "HEAD~1", "--to", "HEAD", "--format", "markdown", "--exit-code")
    old_v2, new_v2, v3 = version(repo, before, "echo-v2"), version(repo, after, "echo-v2"), version(repo, after, "echo-v3")
    assert (done.returncode, done.stderr) == (2, "")
    assert done.stdout == f"""\
### ray-gitops plan: `HEAD~1` → `HEAD`

| create | update | of which restart | delete |
|---:|---:|---:|---:|
| 1 | 3 | 1 | 0 |

| # | action | effect | changes |
|---:|---|---|---|
| 1 | update backend `echo-v1` | in place | `max_concurrent_queries: 100 → 10` |
| 2 | update backend `echo-v2` | **restart** (rolling update) | `version: "{old_v2}" → "{new_v2}"`<br>`init_args: ["a"] → ["b"]`<br>`capacity stays at 1 replica(s), up to 1 extra while updating (max_surge = 1, max_unavailable = 0)` |
| 3 | create backend `echo-v3` | starts replicas | `version: "{v3}"`<br>`import_path: "deployments.apps.echo:Echo"`<br>`num_replicas: 1` |
| 4 | update endpoint `echo` | in place | `traffic: {{"echo-v1": 1.0}} → {{"echo-v1": 0.5, "echo-v3": 0.5}}` |

Plan: 1 to create, 3 to update (1 restart), 0 to delete.
"""  # noqa: E501 — the Markdown table as printed


def test_markdown_of_no_change_says_so(repo: GitRepo) -> None:
    commit(repo, BEFORE)
    done = plan(repo, "--from", "HEAD", "--format", "markdown")
    assert done.stdout == "### ray-gitops plan: `HEAD` → `HEAD`\n\nNo changes.\n"


def test_markdown_of_a_commit_with_errors_lists_them_for_the_comment(repo: GitRepo) -> None:
    commit(repo, BEFORE)
    commit(repo, BEFORE.replace("echo-v1 = 1.0", "echo-v1 = 0.5"))
    done = plan(repo, "--from", "HEAD~1", "--format", "markdown", "--exit-code")
    assert done.returncode == 1
    assert done.stdout == (
        "### ray-gitops plan: spec errors\n\n`HEAD` has 1 error:\n\n```\n"
        "deployments/echo.toml:10:1: endpoints.echo.traffic: weights sum to 0.5, not 1\n```\n"
    )
