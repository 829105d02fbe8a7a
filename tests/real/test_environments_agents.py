"""Three environments on one Ray: real agents, a real git remote, real promotions.

A bare repository served by `git http-backend` on loopback holds `env/dev`,
`env/staging` and `env/prod`; three agents (`gitops run --environment`,
each in its own Ray namespace of the test session's Ray) watch them. The
dev and staging agents hold `--promote-token-file` and promote by push.

- a commit on env/dev is served, soaks, and is pushed to env/staging, which
  the staging agent applies with staging's overrides; it soaks there and is
  pushed to env/prod, which the prod agent applies with prod's. The time
  from the gates passing to the next environment serving the commit is
  measured for both steps, printed and written to the test artifacts
  (`promotion_timing.json`);
- a newer commit during the soak restarts it: the older one is never
  promoted, and never reaches staging or prod;
- a commit whose rollout aborts in dev is never promoted;
- a deny window holds an apply in prod; `gitops sync --override-window`
  without the admin token is refused, with it the commit applies and history
  records who asked (the admin token's fingerprint); a next commit deleting
  the window (and changing what serves) is held by the window in force, not
  let through by its own deletion (issue 50, row 5).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator, NamedTuple

import httpx
import pytest
import ray

from tests.conftest import GitRepo
from tests.support.environments import APP, EnvironmentAgent, echo_spec, promoted, remote_head
from tests.support.gitservers import HttpGitServer, Remote

pytestmark = pytest.mark.real

PROJECT = Path(__file__).resolve().parents[2]

BROKEN_ROLLOUT = """\
[backends.echo]
import_path = "deployments.apps.echo:Echo"
init_args = ["v4"]
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


def promoting(environment: str, to: str) -> str:
    return f"""\
[backends.echo]
runtime_env = {{ env_vars = {{ ENVIRONMENT = "{environment}" }} }}

[promotion]
to = "{to}"
branch = "env/{to}"
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
ADMIN_TOKEN = "prod-admin-token-5f1c0ffee"


class Environments(NamedTuple):
    repo: GitRepo
    remote: Remote
    dev: EnvironmentAgent
    staging: EnvironmentAgent
    prod: EnvironmentAgent


@pytest.fixture
def environments(ray_session: str, repo: GitRepo, tmp_path: Path) -> Iterator[Environments]:
    repo.write("deployments/__init__.py", "")
    repo.write("deployments/apps/__init__.py", "")
    repo.write("deployments/apps/echo.py", APP)
    repo.write("deployments/echo.toml", echo_spec("v1"))
    repo.write("environments/dev.toml", promoting("dev", "staging"))
    repo.write("environments/staging.toml", promoting("staging", "prod"))
    repo.write("environments/prod.toml", PROD)
    repo.commit("v1")
    remote = Remote(tmp_path / "served", repo)
    subprocess.run(["git", "--git-dir", str(remote.path), "config", "http.receivepack", "true"], check=True)
    repo.git("push", "-q", "origin", *(f"HEAD:refs/heads/env/{name}" for name in ("dev", "staging", "prod")))
    server = HttpGitServer(remote.root)
    token = tmp_path / "promote-token"
    token.write_text("promote-secret-token\n")
    token.chmod(0o600)
    address = ray.get_runtime_context().gcs_address
    url = server.url("remote.git")
    promote = ("--promote-token-file", str(token))
    agents = [
        EnvironmentAgent(url, tmp_path / "dev", address, "dev", *promote),
        EnvironmentAgent(url, tmp_path / "staging", address, "staging", *promote),
        EnvironmentAgent(url, tmp_path / "prod", address, "prod", admin_token=ADMIN_TOKEN),
    ]
    try:
        yield Environments(repo, remote, *agents)
    finally:
        for agent in agents:
            agent.stop()
        server.stop()


def send(agent: EnvironmentAgent, count: int) -> None:
    """Evidence: answers from the agent's proxy, none of them 5xx."""
    for _ in range(count):
        assert httpx.get(agent.proxy + "/echo", timeout=5).status_code == 200


def hop(source: EnvironmentAgent, target: EnvironmentAgent, commit: str, label: str) -> dict[str, Any]:
    """`commit` promoted from `source` and served by `target`; how long each stage took after the gates passed."""
    serving_at = target.first_answer(f"{label}:{target.environment}")
    row = promoted(source, commit)
    assert row is not None, f"{target.environment} serves {label} that {source.environment} did not promote"
    target.wait_applied(commit)
    applied_at = time.time()
    soaked = re.search(rf"soak: served (\d+)s of {SOAK_S}s", row["plan_summary"])
    assert soaked is not None and int(soaked.group(1)) >= SOAK_S, row["plan_summary"]
    assert "no_backend_errors: 0 of " in row["plan_summary"], row["plan_summary"]
    assert f"pushed {commit[:7]} to env/{target.environment} (fast-forward)" in row["plan_summary"]
    # The soak is the commit's own, counted from its apply (a newer commit restarts it).
    served = next(r for r in reversed(source.history()) if r["commit"] == commit and r["result"] == "applied")
    assert row["started_at"] - served["finished_at"] >= SOAK_S, (served, row)
    applied = next(r for r in target.history() if r["commit"] == commit and r["result"] == "applied")
    passed_at = row["started_at"]  # the promoted row starts when every gate passed
    # "apply began": the start of the target agent's tick that fetched the commit and applied it.
    timing = {
        "from": source.environment,
        "to": target.environment,
        "gate_passed_to_pushed_s": round(row["finished_at"] - passed_at, 2),
        "gate_passed_to_apply_began_s": round(applied["started_at"] - passed_at, 2),
        "gate_passed_to_serving_s": round(serving_at - passed_at, 2),
        "gate_passed_to_synced_s": round(applied_at - passed_at, 2),
    }
    print(
        f"promotion {source.environment} -> {target.environment}: gates passed -> pushed "
        f"{timing['gate_passed_to_pushed_s']:.2f}s, -> {target.environment}'s apply began "
        f"{timing['gate_passed_to_apply_began_s']:.2f}s, -> serving {timing['gate_passed_to_serving_s']:.2f}s, "
        f"-> Synced {timing['gate_passed_to_synced_s']:.2f}s"
    )
    return timing


def gitops(*args: str, token_file: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "GITOPS_TOKEN"}
    extra = ["--token-file", str(token_file)] if token_file else []
    return subprocess.run(
        [sys.executable, "-m", "gitops", *args, *extra],
        env={**env, "PYTHONPATH": str(PROJECT)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_commit_is_promoted_from_dev_to_staging_to_prod(
    environments: Environments, artifacts_dir: Path, tmp_path: Path
) -> None:
    repo, remote, dev, staging, prod = environments
    first = repo.head()
    for agent in (dev, staging, prod):
        agent.wait_applied(first)
        assert agent.answer() == f"v1:{agent.environment}"
    status = staging.get("/status")
    assert status["environment"]["name"] == "staging" and status["environment"]["branch"] == "env/staging"
    assert status["environment"]["promotion"]["to"] == "prod"

    # A newer commit during the soak restarts it: v2 is never promoted, v3 is, all the way.
    repo.write("deployments/echo.toml", echo_spec("v2"))
    older = repo.commit("v2")
    repo.git("push", "-q", "origin", "HEAD:refs/heads/env/dev")
    dev.wait_applied(older)
    repo.write("deployments/echo.toml", echo_spec("v3"))
    newer = repo.commit("v3")
    repo.git("push", "-q", "origin", "HEAD:refs/heads/env/dev")
    dev.wait_applied(newer)
    send(dev, 10)
    to_staging = hop(dev, staging, newer, "v3")
    assert remote_head(remote, "env/staging") == newer
    send(staging, 10)
    to_prod = hop(staging, prod, newer, "v3")
    assert remote_head(remote, "env/prod") == newer
    assert promoted(dev, older) is None
    assert not any(row["commit"] == older for agent in (staging, prod) for row in agent.history())
    assert prod.get("/status")["environment"]["promotion"] is None  # prod promotes nowhere
    (artifacts_dir / "promotion_timing.json").write_text(
        json.dumps({"soak_s": SOAK_S, "interval_s": 0.5, "hops": [to_staging, to_prod]}, indent=2)
    )
    for timing in (to_staging, to_prod):
        assert timing["gate_passed_to_serving_s"] < 60, timing

    # A commit whose rollout aborts in dev is never promoted.
    repo.write("deployments/echo.toml", BROKEN_ROLLOUT)
    broken = repo.commit("a broken backend behind a rollout")
    repo.git("push", "-q", "origin", "HEAD:refs/heads/env/dev")
    stop = threading.Event()

    def traffic() -> None:
        while not stop.is_set():
            try:
                httpx.get(dev.proxy + "/echo", timeout=5)
            except httpx.HTTPError:
                pass
            time.sleep(0.05)

    sender = threading.Thread(target=traffic, daemon=True)
    sender.start()
    try:
        dev.wait(
            "the rollout aborted",
            lambda: any(r["commit"] == broken and r["result"] == "aborted" for r in dev.history()),
            timeout_s=120,
        )
    finally:
        stop.set()
        sender.join(10)
    aborted_at = time.monotonic()

    # Meanwhile, a deny window holds an apply in prod; --override-window applies
    # it, only with the admin token, and history names the token.
    repo.git("checkout", "-q", newer)
    repo.write("environments/prod.toml", FROZEN)
    frozen = repo.commit("prod: frozen")
    repo.git("push", "-q", "origin", "HEAD:refs/heads/env/prod")
    prod.wait("held", lambda: (s := prod.get("/status"))["status"] == "Held" and s["environment"]["held"]["commit"] == frozen)
    status = prod.get("/status")
    assert status["conditions"][0]["reason"] == "SyncWindow"
    assert status["last_applied_revision"] == newer
    assert status["environment"]["held"]["until"] is not None
    refused = gitops("sync", "--override-window", "--agent", prod.admin)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr, refused.stderr
    assert "missing or wrong bearer token" in refused.stderr, refused.stderr
    assert prod.get("/status")["status"] == "Held"
    token_file = tmp_path / "admin-token-for-cli"
    token_file.write_text(ADMIN_TOKEN + "\n")
    token_file.chmod(0o600)
    fingerprint = hashlib.sha256(ADMIN_TOKEN.encode()).hexdigest()[:12]
    done = gitops("sync", "--override-window", "--agent", prod.admin, token_file=token_file)
    assert done.returncode == 0, done.stderr
    assert f"sync requested past any sync window (recorded in history, by admin token sha256:{fingerprint})" in done.stdout
    prod.wait_applied(frozen)
    overrides = [r for r in prod.history() if r["result"] == "window_override"]
    assert [r["commit"] for r in overrides] == [frozen]
    assert overrides[0]["plan_summary"].startswith(f"sync window overridden by admin token sha256:{fingerprint}: deny window")
    assert ADMIN_TOKEN not in json.dumps(prod.history()) + prod.log_path.read_text()
    # Issue 50, row 5: the windows are the applied commit's; deleting them does not escape them.
    repo.write("environments/prod.toml", PROD.replace('ENVIRONMENT = "prod"', 'ENVIRONMENT = "prod-unfrozen"'))
    escape = repo.commit("prod: unfreeze and ship")
    repo.git("push", "-q", "origin", "HEAD:refs/heads/env/prod")
    prod.wait("the unfreezing commit held",
              lambda: (s := prod.get("/status"))["status"] == "Held" and s["environment"]["held"]["commit"] == escape)
    assert prod.get("/status")["last_applied_revision"] == frozen
    assert not any(row["commit"] == escape for row in prod.history())

    time.sleep(max(0.0, SOAK_S + 3 - (time.monotonic() - aborted_at)))
    assert promoted(dev, broken) is None
    promotion = dev.get("/status")["environment"]["promotion"]
    assert promotion["commit"] == broken and promotion["phase"] == "Failed", promotion
    assert remote_head(remote, "env/staging") == newer
    assert not any(row["commit"] == broken for row in staging.history())
