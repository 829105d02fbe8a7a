"""Two environments on one Ray: real agents, a real git remote, a real promotion.

A bare repository served by `git http-backend` on loopback holds
`env/staging` and `env/prod`; a staging agent and a prod agent (`gitops run
--environment`, each in its own Ray namespace of the test session's Ray)
watch them. Three agents (dev too) would only repeat the staging -> prod
step on this 2-core machine, so the test runs two.

- a commit on env/staging is served, soaks, and is pushed to env/prod (the
  staging agent holds --promote-token-file), which the prod agent applies
  with prod's overrides; the time from the gates passing to prod serving
  the commit is measured and written to the test artifacts;
- a newer commit during the soak restarts it: the older one is never promoted;
- a commit whose rollout aborts in staging is never promoted;
- a deny window holds an apply in prod; `gitops sync --override-window`
  applies it and history records who asked.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import ray

from controller.client import ControllerClient
from vocabulary.goal_api import CONTROLLER_NAME
from tests.conftest import GitRepo
from tests.real.support import AgentProcess
from tests.reliability.gitservers import HttpGitServer, Remote

pytestmark = pytest.mark.real

PROJECT = Path(__file__).resolve().parents[2]

APP = """\
import os


class Echo:
    def __init__(self, label):
        self.label = label

    def __call__(self, request):
        return f"{self.label}:{os.environ.get('ENVIRONMENT', '-')}"


class Broken:
    def __call__(self, request):
        raise RuntimeError("broken on purpose")
"""


def spec(label: str) -> str:
    return f'''\
[backends.echo]
import_path = "deployments.apps.echo:Echo"
init_args = ["{label}"]
runtime_env = {{ env_vars = {{ ENVIRONMENT = "base" }} }}

[endpoints.echo]
route = "/echo"
traffic = {{ echo = 1.0 }}
'''


BROKEN_ROLLOUT = """\
[backends.echo]
import_path = "deployments.apps.echo:Echo"
init_args = ["v3"]
runtime_env = { env_vars = { ENVIRONMENT = "base" } }

[backends.broken]
import_path = "deployments.apps.echo:Broken"

[endpoints.echo]
route = "/echo"
traffic = { echo = 0.5, broken = 0.5 }

[endpoints.echo.rollout]
steps = [0.5, 1.0]
step_interval_s = 2
min_requests = 5
max_error_ratio = 0.01
"""

SOAK_S = 4
STAGING = f"""\
[backends.echo]
runtime_env = {{ env_vars = {{ ENVIRONMENT = "staging" }} }}

[promotion]
to = "prod"
branch = "env/prod"
soak_s = {SOAK_S}
require = ["rollouts", "no_backend_errors"]
mode = "push"
"""
PROD = """\
[backends.echo]
runtime_env = { env_vars = { ENVIRONMENT = "prod" } }
max_concurrent_queries = 50
"""
FROZEN = (
    PROD
    + """
[[sync_windows]]
kind = "deny"
schedule = "* * * * *"
duration_s = 300
timezone = "Europe/Berlin"
"""
)


class EnvironmentAgent(AgentProcess):
    """An AgentProcess in its own namespace, whose controller is shut down with it."""

    def __init__(self, url: str, workdir: Path, ray_address: str, environment: str, *flags: str) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.namespace = f"envs-{environment}-{uuid.uuid4().hex[:6]}"
        super().__init__(
            url,
            workdir,
            ray_address,  # type: ignore[arg-type]  # a URL: str() of it is all AgentProcess needs
            [
                "--branch",
                f"env/{environment}",
                "--environment",
                environment,
                "--namespace",
                self.namespace,
                "--proxy-workers",
                "1",
                *flags,
            ],
        )

    def history(self) -> list[dict[str, Any]]:
        return list(self.get("/history?limit=200")["entries"])

    def answer(self) -> str:
        return httpx.get(self.proxy + "/echo", timeout=5).text

    def stop(self) -> None:
        self.http.close()
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self._log.close()
        try:
            ControllerClient(ray.get_actor(CONTROLLER_NAME, namespace=self.namespace), self.namespace).shutdown()
        except ValueError:
            pass


def remote_head(remote: Remote, branch: str) -> str:
    done = subprocess.run(
        ["git", "--git-dir", str(remote.path), "rev-parse", f"refs/heads/{branch}"], capture_output=True, text=True
    )
    return done.stdout.strip()


@pytest.fixture
def environments(
    ray_session: str, repo: GitRepo, tmp_path: Path
) -> Iterator[tuple[GitRepo, Remote, EnvironmentAgent, EnvironmentAgent]]:
    repo.write("deployments/__init__.py", "")
    repo.write("deployments/apps/__init__.py", "")
    repo.write("deployments/apps/echo.py", APP)
    repo.write("deployments/echo.toml", spec("v1"))
    repo.write("environments/staging.toml", STAGING)
    repo.write("environments/prod.toml", PROD)
    repo.commit("v1")
    remote = Remote(tmp_path / "served", repo)
    subprocess.run(["git", "--git-dir", str(remote.path), "config", "http.receivepack", "true"], check=True)
    repo.git("push", "-q", "origin", "HEAD:refs/heads/env/staging", "HEAD:refs/heads/env/prod")
    server = HttpGitServer(remote.root)
    token = tmp_path / "promote-token"
    token.write_text("promote-secret-token\n")
    token.chmod(0o600)
    address = ray.get_runtime_context().gcs_address
    url = server.url("remote.git")
    staging = EnvironmentAgent(url, tmp_path / "staging", address, "staging", "--promote-token-file", str(token))
    prod = EnvironmentAgent(url, tmp_path / "prod", address, "prod")
    try:
        yield repo, remote, staging, prod
    finally:
        staging.stop()
        prod.stop()
        server.stop()


def promoted(agent: EnvironmentAgent, commit: str) -> dict[str, Any] | None:
    return next((row for row in agent.history() if row["commit"] == commit and row["result"] == "promoted"), None)


def test_a_commit_soaks_in_staging_and_is_promoted_to_prod(
    environments: tuple[GitRepo, Remote, EnvironmentAgent, EnvironmentAgent], artifacts_dir: Path
) -> None:
    repo, remote, staging, prod = environments
    first = repo.head()
    staging.wait_applied(first)
    prod.wait_applied(first)
    status = staging.get("/status")
    assert status["environment"]["name"] == "staging" and status["environment"]["branch"] == "env/staging"
    assert staging.answer() == "v1:staging" and prod.answer() == "v1:prod"

    # A newer commit during the soak restarts it: v2 is never promoted, v3 is.
    repo.write("deployments/echo.toml", spec("v2"))
    older = repo.commit("v2")
    repo.git("push", "-q", "origin", "HEAD:refs/heads/env/staging")
    staging.wait_applied(older)
    repo.write("deployments/echo.toml", spec("v3"))
    newer = repo.commit("v3")
    repo.git("push", "-q", "origin", "HEAD:refs/heads/env/staging")
    staging.wait_applied(newer)
    for _ in range(20):
        httpx.get(staging.proxy + "/echo", timeout=5)  # evidence: answers, none 5xx
    staging.wait("v3 promoted", lambda: promoted(staging, newer) is not None, timeout_s=120)
    row = promoted(staging, newer)
    assert row is not None
    prod.wait("prod serving v3", lambda: prod.answer() == "v3:prod", timeout_s=120)
    served_at = time.time()
    assert promoted(staging, older) is None
    assert remote_head(remote, "env/prod") == newer
    prod.wait_applied(newer)
    soaked = re.search(rf"soak: served (\d+)s of {SOAK_S}s", row["plan_summary"])
    assert soaked is not None and int(soaked.group(1)) >= SOAK_S, row["plan_summary"]
    assert "no_backend_errors: 0 of " in row["plan_summary"]
    gate_to_serving_s = served_at - row["started_at"]
    push_s = row["finished_at"] - row["started_at"]
    (artifacts_dir / "promotion_timing.json").write_text(
        json.dumps(
            {
                "gate_passed_to_prod_serving_s": round(gate_to_serving_s, 2),
                "gate_passed_to_pushed_s": round(push_s, 2),
                "prod_interval_s": 0.5,
            },
            indent=2,
        )
    )
    print(f"promotion: gates passed -> pushed {push_s:.2f}s, -> prod serving {gate_to_serving_s:.2f}s")
    assert gate_to_serving_s < 60

    # A commit whose rollout aborts in staging is never promoted.
    repo.write("deployments/echo.toml", BROKEN_ROLLOUT)
    broken = repo.commit("a broken backend behind a rollout")
    repo.git("push", "-q", "origin", "HEAD:refs/heads/env/staging")
    stop = threading.Event()

    def traffic() -> None:
        while not stop.is_set():
            try:
                httpx.get(staging.proxy + "/echo", timeout=5)
            except httpx.HTTPError:
                pass
            time.sleep(0.05)

    sender = threading.Thread(target=traffic, daemon=True)
    sender.start()
    try:
        staging.wait(
            "the rollout aborted",
            lambda: any(r["commit"] == broken and r["result"] == "aborted" for r in staging.history()),
            timeout_s=120,
        )
    finally:
        stop.set()
        sender.join(10)
    time.sleep(SOAK_S + 3)
    assert promoted(staging, broken) is None
    assert staging.get("/status")["environment"]["promotion"]["commit"] == broken
    assert remote_head(remote, "env/prod") == newer

    # A deny window holds an apply in prod; --override-window applies it, on record.
    repo.git("checkout", "-q", newer)
    repo.write("environments/prod.toml", FROZEN)
    frozen = repo.commit("prod: frozen")
    repo.git("push", "-q", "origin", "HEAD:refs/heads/env/prod")
    prod.wait("held", lambda: (s := prod.get("/status"))["status"] == "Held" and s["environment"]["held"]["commit"] == frozen)
    status = prod.get("/status")
    assert status["conditions"][0]["reason"] == "SyncWindow"
    assert status["last_applied_revision"] == newer
    assert status["environment"]["held"]["until"] is not None
    done = subprocess.run(
        [sys.executable, "-m", "gitops", "sync", "--override-window", "--agent", prod.admin],
        env={**os.environ, "PYTHONPATH": str(PROJECT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "sync requested past any sync window" in done.stdout
    prod.wait_applied(frozen)
    override = next(r for r in prod.history() if r["result"] == "window_override")
    assert override["commit"] == frozen
    assert override["plan_summary"].startswith(
        "sync window overridden by a loopback client (no admin token configured): deny window"
    )
