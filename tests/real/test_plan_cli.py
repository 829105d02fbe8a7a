"""`gitops plan` as a user runs it: a subprocess against a real git repository."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
import ray

from controller.client import start_or_connect
from gitops.specs.loading import Loader
from tests.conftest import GitRepo
from tests.support.stack import agent_namespace

pytestmark = pytest.mark.real

PROJECT = Path(__file__).resolve().parents[2]

APP = '''\
class Echo:
    def __init__(self, word="hello"):
        self.word = word

    def __call__(self, request):
        return self.word
'''

V1 = '''\
[backends.echo-v1]
import_path = "deployments.apps.echo:Echo"
num_replicas = 1

[endpoints.echo]
route = "/echo"
traffic = { echo-v1 = 1.0 }
'''

V2 = '''\
[backends.echo-v1]
import_path = "deployments.apps.echo:Echo"
num_replicas = 2

[backends.echo-v2]
import_path = "deployments.apps.echo:Echo"
init_args = ["v2"]

[endpoints.echo]
route = "/echo"
traffic = { echo-v1 = 0.9, echo-v2 = 0.1 }
'''

BROKEN = '''\
[backends.echo-v1]
import_path = "deployments.apps.echo:Echo"
num_replicas = -1

[endpoints.echo]
route = "/echo"
traffic = { echo-v1 = 1.0 }
'''


def gitops_plan(repo: GitRepo, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gitops", "plan", "--repo", str(repo.root), *args],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def commit_specs(repo: GitRepo, text: str) -> str:
    repo.write("deployments/apps/echo.py", APP)
    repo.write("deployments/echo.toml", text)
    return repo.commit("specs")


def test_plan_between_two_commits_shows_changes_in_apply_order(repo: GitRepo) -> None:
    first = commit_specs(repo, V1)
    second = commit_specs(repo, V2)
    done = gitops_plan(repo, "--from", first, "--to", second)
    assert (done.returncode, done.stderr) == (0, "")
    lines = done.stdout.splitlines()
    assert [line for line in lines if line.startswith(("+ ", "~ ", "- "))] == [
        "~ backend echo-v1 (in place)",
        "+ backend echo-v2",
        "~ endpoint echo",
    ]
    assert "    num_replicas: 1 → 2" in lines
    assert lines[-1] == "Plan: 1 to create, 2 to update, 0 to delete."


def test_plan_names_the_code_file_that_changed_a_version(repo: GitRepo) -> None:
    """In the layout `gitops init` makes (code beside its spec), the spec edit
    restarts nothing and a code edit names its file."""
    repo.write("deployments/hello.py", APP)
    repo.write("deployments/hello.toml", V1.replace("deployments.apps.echo", "deployments.hello"))
    first = repo.commit("first")
    repo.write("deployments/hello.toml", V1.replace("deployments.apps.echo", "deployments.hello").replace("= 1\n", "= 3\n"))
    second = repo.commit("three replicas")
    repo.write("deployments/hello.py", APP.replace('"hello"', '"hi"'))
    repo.write("deployments/notes.md", "not code")
    third = repo.commit("new greeting")

    spec_edit = gitops_plan(repo, "--from", first, "--to", second)
    assert spec_edit.returncode == 0, spec_edit.stderr
    assert "~ backend echo-v1 (in place)" in spec_edit.stdout.splitlines()

    code_edit = gitops_plan(repo, "--from", second, "--to", third)
    assert code_edit.returncode == 0, code_edit.stderr
    lines = code_edit.stdout.splitlines()
    assert "~ backend echo-v1 (restart)" in lines
    assert "    code changed: deployments/hello.py" in lines
    listed = json.loads(gitops_plan(repo, "--from", second, "--to", third, "--json").stdout)
    assert listed["actions"][0]["code_changes"] == ["deployments/hello.py"]


def test_plan_without_from_creates_everything_at_head(repo: GitRepo) -> None:
    commit_specs(repo, V1)
    done = gitops_plan(repo)
    assert done.returncode == 0
    assert done.stdout.splitlines()[0] == "+ backend echo-v1"
    assert done.stdout.splitlines()[-1] == "Plan: 2 to create, 0 to update, 0 to delete."


def test_plan_of_a_commit_against_itself_says_no_changes(repo: GitRepo) -> None:
    head = commit_specs(repo, V1)
    done = gitops_plan(repo, "--from", head, "--to", head)
    assert (done.returncode, done.stdout) == (0, "No changes.\n")


def test_plan_json_lists_actions_and_summary(repo: GitRepo) -> None:
    first = commit_specs(repo, V1)
    commit_specs(repo, V2)
    done = gitops_plan(repo, "--from", first, "--json")
    data = json.loads(done.stdout)
    assert [(a["kind"], a["name"]) for a in data["actions"]] == [
        ("update_backend", "echo-v1"),
        ("create_backend", "echo-v2"),
        ("update_endpoint", "echo"),
    ]
    assert data["summary"] == {"create": 1, "update": 2, "restart": 0, "delete": 0}


def test_plan_of_a_commit_with_spec_errors_prints_them_located_and_exits_1(repo: GitRepo) -> None:
    first = commit_specs(repo, V1)
    commit_specs(repo, BROKEN)
    done = gitops_plan(repo, "--from", first)
    assert (done.returncode, done.stdout) == (1, "")
    assert any(line.startswith("deployments/echo.toml:3:") for line in done.stderr.splitlines())
    assert "Traceback" not in done.stderr


def test_plan_with_an_unknown_revision_is_one_line_error(repo: GitRepo) -> None:
    commit_specs(repo, V1)
    done = gitops_plan(repo, "--from", "no-such-rev")
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1
    assert "no-such-rev" in done.stderr and "Traceback" not in done.stderr


def test_plan_live_with_from_is_a_usage_error(repo: GitRepo) -> None:
    head = commit_specs(repo, V1)
    done = gitops_plan(repo, "--live", "--from", head)
    assert done.returncode == 1
    assert done.stderr.strip() == "gitops plan: --live plans against the running controller; leave out --from"


def test_plan_live_without_a_controller_says_so_in_one_line(repo: GitRepo, ray_session: str) -> None:
    commit_specs(repo, V1)
    done = gitops_plan(repo, "--live", "--ray-address", ray.get_runtime_context().gcs_address)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"gitops plan: --live: no gitops controller is running in Ray namespace '{agent_namespace()}'"
    )


def test_plan_live_diffs_the_commit_against_the_running_controller(repo: GitRepo, ray_session: str) -> None:
    commit_specs(repo, V1)
    running = Loader().load_commit(repo.root).state.backends["echo-v1"].model_copy(update={"num_replicas": 0})
    # No proxies: this test needs only the controller's configured state.
    client = start_or_connect(agent_namespace(), proxy_port=0, options={"proxy_class": None})
    try:
        asyncio.run(client.apply_backend(running))
        done = gitops_plan(repo, "--live", "--ray-address", ray.get_runtime_context().gcs_address)
    finally:
        client.shutdown()
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:3] == ["~ backend echo-v1 (in place)", "    num_replicas: 0 → 1", "+ endpoint echo"]
    assert done.stdout.splitlines()[-1] == "Plan: 1 to create, 1 to update, 0 to delete."
