"""`gitops run --notify` as a user runs it: flags checked before anything
starts, and a real agent telling a loopback webhook about a bad commit and
the good one after it."""

from __future__ import annotations

import hashlib
import hmac
import subprocess
import sys
from pathlib import Path

import pytest
import ray

from tests.conftest import GitRepo
from tests.support.receivers import Receiver
from tests.support.stack import AgentProcess

pytestmark = pytest.mark.real

PROJECT = Path(__file__).resolve().parents[2]
APP = "class Hello:\n    def __call__(self, request):\n        return 'hello'\n"
SPEC = """\
[backends.hello-v1]
import_path = "apps.hello:Hello"
num_replicas = 1
ray_actor_options = { num_cpus = 0 }

[endpoints.hello]
route = "/hello"
traffic = { hello-v1 = 1.0 }
"""
TEMPLATE = "https://forge.example.com/you/specs/commit/{sha}"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gitops", "run", "--admin-port", "0", *args],
        cwd=cwd, capture_output=True, text=True, timeout=60,
    )


def test_a_bad_commit_url_template_stops_run_before_it_starts(repo: GitRepo) -> None:
    repo.commit("empty")
    done = run("--commit-url-template", "https://forge.example.com/commit/", cwd=repo.root)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "gitops run: --commit-url-template must contain {sha} (got 'https://forge.example.com/commit/')\n"
    )


def test_a_notify_file_with_mistakes_stops_run_with_every_error_located(repo: GitRepo, tmp_path: Path) -> None:
    repo.commit("empty")
    notify = tmp_path / "notify.toml"
    notify.write_text('[providers.gh]\ntype = "github"\nrepository = "you/specs"\ntoken_file = "/nonexistent"\n'
                      '\n[providers.chat]\ntype = "slack"\nurl = "https://hooks.slack.com/x"\nevents = ["deployed"]\n')
    done = run("--notify", str(notify), cwd=repo.root)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"gitops run: --notify {notify} is invalid:",
        f"{notify}:4:1: providers.gh.token_file: cannot read /nonexistent: No such file or directory",
        f"{notify}:9:11: providers.chat.events.0: must be one of seen, applying, applied, invalid, apply_failed, "
        "rollout_aborted, "
        "rolled_back, commit_quarantined, synced, git_unreachable, promoted, action",
    ]


def test_a_notify_file_inside_the_watched_repository_is_refused(repo: GitRepo) -> None:
    repo.commit("empty")
    repo.write("notify.toml", '[providers.hook]\ntype = "webhook"\nurl = "http://127.0.0.1:9/"\n')
    done = run("--notify", "notify.toml", cwd=repo.root)
    assert done.returncode == 1
    assert done.stderr == (
        "gitops run: --notify notify.toml: keep it outside the watched repository .; it holds secrets\n"
    )


def test_a_real_agent_notifies_a_bad_commit_and_the_good_one_after_it(
    ray_session: str, repo: GitRepo, tmp_path: Path
) -> None:
    repo.write("apps/__init__.py", "")
    repo.write("apps/hello.py", APP)
    repo.write("deployments/hello.toml", SPEC)
    first = repo.commit("hello")
    (tmp_path / "hmac-key").write_text("k3y\n")
    with Receiver() as receiver, Receiver() as forge:
        notify = tmp_path / "notify.toml"
        notify.write_text(f'[providers.hook]\ntype = "webhook"\nurl = "{receiver.url}/hook"\n'
                          f'secret_file = "{tmp_path / "hmac-key"}"\n'
                          f'[providers.ci]\ntype = "gitlab"\nproject = 7\ntoken = "glpat-x"\napi_url = "{forge.url}"\n')
        agent = AgentProcess(repo.root, tmp_path, ray.get_runtime_context().gcs_address, extra_args=[
            "--notify", str(notify), "--public-url", "https://gitops.example.com", "--commit-url-template", TEMPLATE,
        ])
        try:
            agent.wait_applied(first)
            receiver.wait_for(1)
            repo.write("deployments/hello.toml", SPEC.replace("num_replicas = 1", "num_replicas = -1"))
            bad = repo.commit("a negative replica count")
            receiver.wait_for(2, timeout_s=60)
            repo.write("deployments/hello.toml", SPEC)
            good = repo.commit("fixed")
            agent.wait_applied(good)
            received = receiver.wait_for(4, timeout_s=60)
            statuses = forge.wait_for(8, timeout_s=30)
            # The receiver holds the fourth notification a moment before the agent counts its answer.
            agent.wait("the fourth delivery counted",
                       lambda: agent.get("/status")["notifications"]["hook"]["delivered"] == 4, timeout_s=30)
            agent.wait("the fourth delivery in the metrics",
                       lambda: 'gitops_notifications_total{provider="hook",result="success"} 4.0' in agent.metrics(),
                       timeout_s=30)
            status = agent.get("/status")
            metrics = agent.metrics()
        finally:
            agent.stop()
    events = [(request.json()["event"], request.json()["commit"]) for request in received]
    assert events == [("applied", first), ("invalid", bad), ("applied", good), ("synced", good)]
    invalid = received[1].json()
    assert invalid["errors"] == ["deployments/hello.toml:3:16: backends.hello-v1.num_replicas: must be >= 0 (got -1)"]
    assert invalid["commit_url"] == TEMPLATE.format(sha=bad)
    assert invalid["history_url"] == f"https://gitops.example.com/#commit-{bad}"
    for request in received:
        signature = hmac.new(b"k3y", request.body, hashlib.sha256).hexdigest()
        assert (request.path, request.headers["x-signature"]) == ("/hook", f"sha256={signature}")
    assert status["notifications"]["hook"]["delivered"] == 4
    states = [(request.path.rsplit("/", 1)[1], request.json()["state"]) for request in statuses]
    assert states == [
        (first, "pending"), (first, "running"), (first, "success"), (bad, "pending"), (bad, "failed"),
        # The fix restores the running state: nothing to apply, so no running state.
        (good, "pending"), (good, "success"), (good, "success"),
    ]
    assert 'gitops_notifications_total{provider="hook",result="success"} 4.0' in metrics
