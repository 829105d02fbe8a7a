"""Replicas of an embedded Ray get an allow-list of the agent's environment (issue 27 row 16).

A real `gitops run` with its embedded Ray (no --ray-address), watching a
repository served by a real git HTTP server with credentials in the URL,
started as the Docker image starts it (`GITOPS_REPO` holds the URL) with
`GITOPS_TOKEN`, cloud credentials and variables of its own in its
environment. A backend answers with its replica's `os.environ` and
`/proc/self/environ` (what the process was started with). The agent's
secrets and settings are in neither; cloud credentials and names added with
`--replica-env` are. The same agent, without an admin token (the default),
shows row 9 against a real admin listener: a page served by the proxy
cannot POST to it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from tests.conftest import GitRepo
from tests.support.gitserver import GitHttpServer, serving
from tests.support.stack import free_port

pytestmark = pytest.mark.real

PASSWORD = "repo-pass-3e9b71c0d4a2"
ADMIN_TOKEN = "cli-admin-token-6f02d8aa91"  # the CLI's GITOPS_TOKEN, in the agent's environment
AWS_KEY = "AKIAEXAMPLE7Q2R4T6Y8"

ENV_DUMP = '''
import os


class EnvDump:
    def __call__(self, request):
        with open("/proc/self/environ", "rb") as file:
            started = file.read().decode(errors="replace")
        return {"environ": dict(os.environ), "started_with": started.split("\\0")}
'''
SPEC = '''
[backends.envdump]
import_path = "apps.envdump:EnvDump"
ray_actor_options = { num_cpus = 0.1 }

[endpoints.env]
route = "/env"
traffic = { envdump = 1.0 }
'''


class Agent:
    def __init__(self, process: subprocess.Popen[str], admin: str, proxy: str, log: Path) -> None:
        self.process = process
        self.admin = admin
        self.proxy = proxy
        self.log = log


def wait(what: str, agent: Agent, done: Any, timeout_s: float = 240) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        assert agent.process.poll() is None, f"gitops run exited:\n{agent.log.read_text()[-3000:]}"
        try:
            value = done()
            if value:
                return value
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{agent.log.read_text()[-3000:]}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    root = tmp_path_factory.mktemp("replica-env")
    work = GitRepo(root / "work")
    work.write("apps/__init__.py", "")
    work.write("apps/envdump.py", ENV_DUMP)
    work.write("deployments/env.toml", SPEC)
    work.commit("a backend that shows its environment")
    (root / "served").mkdir()
    subprocess.run(["git", "clone", "-q", "--bare", str(work.root), str(root / "served" / "specs.git")], check=True)
    with serving(root / "served", PASSWORD, delay_s=0.0) as server:
        yield from _run(server, root)


def _run(server: GitHttpServer, root: Path) -> Iterator[Agent]:
    url = server.url("specs.git", f"deploy:{PASSWORD}")
    admin_port, proxy_port = free_port(), free_port()
    env = {name: value for name, value in os.environ.items() if not name.startswith("RAY_")}
    env.update({
        "GITOPS_REPO": url, "GITOPS_TOKEN": ADMIN_TOKEN, "AWS_ACCESS_KEY_ID": AWS_KEY,
        "MY_APP_SETTING": "kept-by-flag", "UNLISTED_SECRET": "not-for-replicas", "PYTHONUNBUFFERED": "1",
    })
    log = root / "agent.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "gitops", "run", "--repo", url, "--branch", "main", "--path", "deployments",
             "--state-dir", str(root / "state"), "--proxy-port", str(proxy_port), "--admin-port", str(admin_port),
             "--proxy-metrics-port", str(free_port()), "--interval", "1", "--replica-env", "MY_APP_*"],
            env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
        )
    agent = Agent(process, f"http://127.0.0.1:{admin_port}", f"http://127.0.0.1:{proxy_port}", log)
    try:
        yield agent
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def replica(agent: Agent) -> dict[str, Any]:
    def answer() -> dict[str, Any] | None:
        response = httpx.get(agent.proxy + "/env", timeout=10)
        return response.json() if response.status_code == 200 else None

    return wait("the envdump replica to answer", agent, answer)


def started_with(replica: dict[str, Any]) -> dict[str, str]:
    return dict(entry.partition("=")[::2] for entry in replica["started_with"] if entry)


def test_row16_the_replica_sees_no_gitops_setting_or_secret(replica: dict[str, Any]) -> None:
    for where, environ in (("os.environ", replica["environ"]), ("/proc/self/environ", started_with(replica))):
        assert environ, f"{where} is empty: the test proves nothing"
        assert not [name for name in environ if name.startswith("GITOPS_")], where
        text = repr(environ)
        for secret in (PASSWORD, ADMIN_TOKEN):
            assert secret not in text, f"{secret} is in the replica's {where}"
        assert "UNLISTED_SECRET" not in environ, where


def test_row16_cloud_credentials_and_added_names_stay_available(replica: dict[str, Any]) -> None:
    for environ in (replica["environ"], started_with(replica)):
        assert environ.get("AWS_ACCESS_KEY_ID") == AWS_KEY
        assert environ.get("MY_APP_SETTING") == "kept-by-flag"
        assert environ.get("PATH")


def test_row9_without_a_token_a_page_on_the_proxy_port_cannot_post(agent: Agent, replica: dict[str, Any]) -> None:
    for path in ("/suspend", "/sync", "/rollback"):
        response = httpx.post(agent.admin + path, headers={"Origin": agent.proxy}, timeout=10)
        assert response.status_code == 403 and "cross-origin" in response.json()["error"], path
    assert httpx.get(agent.admin + "/status", timeout=10).json()["status"] != "Suspended"
    # The agent's own page may post, with the CSRF token its markup carries; a same-origin
    # POST without it is refused too (a page injected on the admin port has no token).
    same_origin = {"Origin": agent.admin}
    refused = httpx.post(agent.admin + "/sync", headers=same_origin, timeout=10)
    assert refused.status_code == 403 and "X-CSRF-Token" in refused.json()["error"]
    page = httpx.get(agent.admin + "/", timeout=10).text
    token = re.search(r'<meta name="gitops-csrf" content="([^"]+)">', page)
    assert token is not None, "the status page carries no CSRF token"
    answer = httpx.post(agent.admin + "/sync", headers={**same_origin, "X-CSRF-Token": token[1]}, timeout=10)
    assert answer.status_code == 202, answer.text
