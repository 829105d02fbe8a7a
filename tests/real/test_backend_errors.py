"""A handler that raises is seen where users look: status, the agent's log and `gitops logs`.

A real `gitops run` joined to the session's Ray, its state dir inside the
repository as `gitops init`'s layout has it, so the client commands below find
the agent with no flag; the agent is waited for as the tutorial does
(`--ready-file`, then `gitops wait`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import ray

from tests.conftest import GitRepo
from tests.support.stack import AgentProcess, gitops_cli as gitops

pytestmark = pytest.mark.real

APP = '''\
from starlette.requests import Request


class Boom:
    def __init__(self) -> None:
        print("boom backend loading", flush=True)

    async def __call__(self, request: Request) -> dict:
        if request.url.path.endswith("/fine"):
            return {"fine": True}
        if request.url.path.endswith("/key"):
            raise KeyError("a key the follower waits for")
        return {"ratio": 1 / 0}
'''
RAISING_LINE = APP.splitlines().index('        return {"ratio": 1 / 0}') + 1

SPEC = '''\
[backends.boom]
import_path = "deployments.boom:Boom"
num_replicas = 1
ray_actor_options = { num_cpus = 0.1 }

[endpoints.boom]
route = "/boom"
traffic = { boom = 1.0 }
'''


@pytest.fixture
def agent(ray_session: str, repo: GitRepo, tmp_path: Path):
    repo.write("deployments/__init__.py", "")
    repo.write("deployments/boom.py", APP)
    repo.write("deployments/boom.toml", SPEC)
    repo.commit("boom")
    running = AgentProcess(repo.root, tmp_path, ray.get_runtime_context().gcs_address, extra_args=[
        "--state-dir", str(repo.root / ".gitops-state"), "--ready-file", str(tmp_path / "ready"),
    ])
    try:
        yield running
    finally:
        running.stop()


def test_a_raising_handler_shows_as_backend_errors_with_its_exception_in_status_log_and_logs(
    agent: AgentProcess, repo: GitRepo, tmp_path: Path
) -> None:
    inside = repo.root / "deployments"
    agent.wait("the ready file", lambda: (tmp_path / "ready").is_file(), timeout_s=180)
    assert (tmp_path / "ready").read_text().strip() == agent.admin
    assert (repo.root / ".gitops-state" / "agent_address").read_text().strip() == agent.admin
    assert "gitops: ready" in agent.log_path.read_text()
    waited = gitops("wait", "--timeout", "180", cwd=inside)  # found through the state dir, no flag
    assert waited.returncode == 0, waited.stderr + agent.log_tail()
    assert gitops("status", "--exit-code", cwd=inside).returncode == 0

    assert httpx.get(agent.proxy + "/boom/fine", timeout=10).status_code == 200
    raised_at = time.monotonic()
    for _ in range(5):
        assert httpx.get(agent.proxy + "/boom", timeout=10).status_code == 500
    where = f"deployments/boom.py:{RAISING_LINE}"

    def degraded_with_the_exception() -> bool:
        status = agent.get("/status")
        ready = status["conditions"][0]
        return ready["reason"] == "BackendErrors" and where in ready["message"]

    seconds = agent.wait("BackendErrors with the exception", degraded_with_the_exception, timeout_s=60)
    assert seconds < 15, f"status showed the handler's error {seconds:.1f}s after it raised"
    print(f"BackendErrors with {where} shown {time.monotonic() - raised_at:.1f}s after the first 500")

    agent.wait("the endpoint's own counts", lambda: (
        (served := agent.get("/status")["endpoints"]["boom"]["serving"])["requests"] >= 6 and served["errors"] >= 5
    ))

    shown = gitops("status", "--exit-code", cwd=inside)
    assert shown.returncode == 2, shown.stdout + shown.stderr
    assert "Status:     Degraded (BackendErrors: boom: " in shown.stdout
    assert f"Latest exception of boom: ZeroDivisionError: division by zero at {where}" in shown.stdout
    assert "5xx in the last" in shown.stdout

    agent.wait("the agent's log line", lambda: "backend boom answers 5xx" in agent.log_path.read_text())

    logs = gitops("logs", "boom", cwd=inside)
    assert logs.returncode == 0, logs.stderr
    lines = logs.stdout.splitlines()
    assert any(line.endswith("| boom backend loading") for line in lines), logs.stdout
    assert any(line.endswith("| Traceback (most recent call last):") for line in lines), logs.stdout
    assert any(line.endswith("| ZeroDivisionError: division by zero") for line in lines), logs.stdout
    assert not any(":actor_name:" in line or ":job_id:" in line for line in lines), logs.stdout
    assert "Traceback" not in agent.log_path.read_text()

    # --follow prints what the replicas write from now on, here a new traceback.
    env = {k: v for k, v in os.environ.items() if k not in ("GITOPS_AGENT", "GITOPS_TOKEN")}
    follower = subprocess.Popen([sys.executable, "-m", "gitops", "logs", "boom", "--follow", "--since", "1s"],
                                cwd=inside, env={**env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    followed: list[str] = []

    def read() -> None:
        assert follower.stdout is not None
        for line in follower.stdout:
            followed.append(line.rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()
    try:
        time.sleep(2)
        assert httpx.get(agent.proxy + "/boom/key", timeout=10).status_code == 500
        deadline = time.monotonic() + 30
        while not any(line.endswith("| KeyError: 'a key the follower waits for'") for line in followed):
            assert time.monotonic() < deadline and follower.poll() is None, followed
            time.sleep(0.2)
    finally:
        follower.terminate()
        follower.wait(timeout=10)


BROKEN = '''\
class Broken:
    def __init__(self) -> None:
        print("loading weights from /models/broken", flush=True)
        raise RuntimeError("model weights: sha256 mismatch")

    async def __call__(self, request):
        return "never"
'''
BROKEN_SPEC = '''\
[backends.broken]
import_path = "deployments.broken:Broken"
ray_actor_options = { num_cpus = 0.1 }
'''


def test_logs_of_replicas_that_failed_to_start_shows_their_errors_and_an_empty_answer_says_why(
    agent: AgentProcess, repo: GitRepo, tmp_path: Path
) -> None:
    """Issue 49 row 3: the commit adding `broken` fails (its replicas cannot start) and is
    reverted, so the backend is gone, yet `gitops logs broken` shows why its replicas failed."""
    inside = repo.root / "deployments"
    agent.wait("the ready file", lambda: (tmp_path / "ready").is_file(), timeout_s=180)
    quiet = gitops("logs", "boom", "--previous", cwd=inside)
    assert (quiet.returncode, quiet.stdout) == (0, ""), quiet.stderr
    assert quiet.stderr.strip() == (
        "gitops logs: no replica of boom was replaced since the controller started (it keeps the last 100 "
        "replaced); without --previous: the replicas running now"
    )
    repo.write("deployments/broken.py", BROKEN)
    repo.write("deployments/broken.toml", BROKEN_SPEC)
    commit = repo.commit("a backend whose replicas cannot start")

    def failed() -> bool:
        history = agent.get("/history")
        entries = history if isinstance(history, list) else history.get("entries", [])
        return any(entry["commit"] == commit and entry["result"] == "failed" for entry in entries)

    agent.wait(f"{commit[:7]} failed", failed, timeout_s=120)
    logs = gitops("logs", "broken", "--since", "5m", cwd=inside)
    assert logs.returncode == 0, logs.stderr
    failed = [line for line in logs.stdout.splitlines() if " | failed to start: " in line]
    assert failed and all(
        line.endswith("| failed to start: RuntimeError: model weights: sha256 mismatch (deployments/broken.py:4)")
        for line in failed
    ), logs.stdout
    assert "loading weights" not in logs.stdout  # a replaced replica's own lines: with --previous
    previous = gitops("logs", "broken", "--previous", cwd=inside)
    assert previous.returncode == 0 and previous.stdout.count("failed to start: RuntimeError") >= len(failed)
    # What each wrote before it was replaced, read just before the kill.
    assert previous.stdout.count("| loading weights from /models/broken") >= len(failed), previous.stdout
    time.sleep(2)
    recent = gitops("logs", "broken", "--previous", "--since", "1s", cwd=inside)
    assert (recent.returncode, recent.stdout) == (0, ""), recent
    assert recent.stderr.startswith("gitops logs: no replica of broken was replaced in the last 1s"), recent.stderr
