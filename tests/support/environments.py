"""Environment agents for the real tests of docs/guides/environments.md.

Owned here: `EnvironmentAgent`, one `gitops run --environment NAME` joined to
the test session's Ray in a namespace of its own and watching `env/NAME`
(its controller shut down with it; with `admin_token`, every admin call
carries it), the echo app the environment tests serve (it answers
`LABEL:ENVIRONMENT`, so a test sees which commit and which environment
file serve), and small readings of a bare remote and of an agent's history.
Test support only.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import ray

from controller.client import ControllerClient
from tests.support.gitservers import Remote
from tests.support.stack import AgentProcess
from vocabulary.control.goal_api import CONTROLLER_NAME

__all__ = ["APP", "EnvironmentAgent", "echo_spec", "promoted", "remote_head"]

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


def echo_spec(label: str) -> str:
    """deployments/echo.toml: one backend answering `label:ENVIRONMENT` on /echo."""
    return f'''\
[backends.echo]
import_path = "deployments.apps.echo:Echo"
init_args = ["{label}"]
runtime_env = {{ env_vars = {{ ENVIRONMENT = "base" }} }}

[endpoints.echo]
route = "/echo"
traffic = {{ echo = 1.0 }}
'''


class EnvironmentAgent(AgentProcess):
    """An AgentProcess for one environment, in its own namespace, whose controller is shut down with it."""

    def __init__(
        self, url: str, workdir: Path, ray_address: str, environment: str, *flags: str, admin_token: str | None = None
    ) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.environment = environment
        self.namespace = f"envs-{environment}-{uuid.uuid4().hex[:6]}"
        if admin_token is not None:
            token_file = workdir / "admin-token"
            token_file.write_text(admin_token + "\n")
            token_file.chmod(0o600)
            flags = (*flags, "--admin-token-file", str(token_file))
        super().__init__(
            url,  # type: ignore[arg-type]  # a URL: str() of it is all AgentProcess needs
            workdir,
            ray_address,
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
        if admin_token is not None:
            self.http.close()
            self.http = httpx.Client(timeout=10, headers={"Authorization": f"Bearer {admin_token}"})

    def history(self) -> list[dict[str, Any]]:
        return list(self.get("/history?limit=200")["entries"])

    def answer(self) -> str:
        return httpx.get(self.proxy + "/echo", timeout=5).text

    def first_answer(self, expected: str, timeout_s: float = 120) -> float:
        """Poll the proxy until it answers `expected`; the wall-clock time it first did."""
        self.wait(f"{self.environment} answering {expected!r}", lambda: self.answer() == expected, timeout_s=timeout_s)
        return time.time()

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
    """The commit `branch` of the bare remote points at ("" when it has no such branch)."""
    done = subprocess.run(
        ["git", "--git-dir", str(remote.path), "rev-parse", "--verify", "-q", f"refs/heads/{branch}"],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip()


def promoted(agent: EnvironmentAgent, commit: str) -> dict[str, Any] | None:
    """The agent's `promoted` history row for `commit`, if it promoted it."""
    return next((row for row in agent.history() if row["commit"] == commit and row["result"] == "promoted"), None)
