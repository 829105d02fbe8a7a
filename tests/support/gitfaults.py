"""What the git scenarios share: an agent on a remote, and break-then-mend under load.

Owns the shape of scenarios 6a-6e: break the remote, wait for the condition
status shows (and its message, credentials redacted), push a commit while
broken, mend the remote, and time until that commit is applied; the data
plane's numbers are recorded. Also the agent's flags for these scenarios
(a short `--fetch-timeout`).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import ray

from tests.conftest import GitRepo
from tests.support.agents import LOAD_PATH, conditions, write_service
from tests.support.gitservers import HttpGitServer, Remote
from tests.support.load import SteadyLoad
from tests.support.scenario import record_run, under_load
from tests.support.stack import AgentProcess

__all__ = ["FETCH_TIMEOUT_S", "SECRET", "LAST_FETCH", "World", "start_agent", "break_and_recover"]

FETCH_TIMEOUT_S = 3.0
SECRET = "s3cret-token"
LAST_FETCH = "gitops_last_fetch_success_timestamp_seconds"


@dataclass
class World:
    work: GitRepo
    remote: Remote
    agent: AgentProcess
    http: HttpGitServer | None = None

    @property
    def url(self) -> str:
        return self.agent.proxy + LOAD_PATH

    def git_condition(self, reason: str) -> str:
        """The message of the condition with `reason`, once status shows it."""
        found = [c["message"] for c in conditions(self.agent) if c["reason"] == reason]
        return found[0] if found else ""

    def last_fetch_success(self) -> float:
        match = re.search(rf"^{LAST_FETCH} (\S+)$", self.agent.metrics(), re.M)
        return float(match.group(1)) if match else 0.0


def start_agent(repo_url: str, workdir: Path) -> AgentProcess:
    workdir.mkdir(parents=True, exist_ok=True)
    return AgentProcess(repo_url, workdir, ray.get_runtime_context().gcs_address,  # type: ignore[arg-type]  # a URL string where a path is typed
                        ["--fetch-timeout", str(FETCH_TIMEOUT_S)])


def break_and_recover(
    world: World, row: str, title: str, window_s: float,
    break_remote: Callable[[], None], mend_remote: Callable[[], None], reason: str = "GitUnreachable",
) -> None:
    marks: dict[str, object] = {}

    def fault(_: SteadyLoad) -> float:
        broke = time.monotonic()
        break_remote()
        world.agent.wait(reason, lambda: bool(world.git_condition(reason)), FETCH_TIMEOUT_S + 30)
        marks["detected_s"] = time.monotonic() - broke
        marks["message"] = world.git_condition(reason)
        stale = world.last_fetch_success()
        commit = write_service(world.work, f"after-{row}")
        world.remote.push()
        mended = time.monotonic()
        mend_remote()
        world.agent.wait_applied(commit)
        marks["advanced"] = world.last_fetch_success() > stale
        return time.monotonic() - mended

    report, recovery_s = under_load(world.url, window_s, fault)
    record_run(row, title, report, recovery_s, 0,
               f"{reason} after {marks['detected_s']:.1f} s; recovery = remote back to commit applied")
    assert report.failed == 0, report.summary()
    assert SECRET not in str(marks["message"]) and SECRET not in world.agent.log_path.read_text()
    assert marks["advanced"] is True
    assert not world.git_condition(reason)
