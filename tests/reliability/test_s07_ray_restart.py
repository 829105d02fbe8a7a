"""Scenario 7: Ray restarts under the agent (a `--ray-address` cluster killed
and started again on the same address).

The agent notices within its resync interval, re-creates the controller,
the proxies and everything from git, serves again, and says so in status
and in its log. Requests fail only while Ray is down.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.conftest import GitRepo
from tests.support.agents import LOAD_PATH, write_service
from tests.support.load import SteadyLoad
from tests.support.rayheads import RayHead
from tests.support.scenario import record_run, under_load
from tests.support.stack import AgentProcess

# Ray's own start-up (~10 s here) plus the resync interval (2 s) and a
# replica start, on a loaded 2-core machine.
SERVE_AGAIN_WITHIN_S = 90.0


@pytest.fixture
def head(tmp_path: Path) -> Iterator[RayHead]:
    started = RayHead(tmp_path)
    yield started
    started.remove()


def test_the_agent_recreates_everything_after_ray_restarts(
    ray_session: str, head: RayHead, repo: GitRepo, tmp_path: Path, window_s: float
) -> None:
    first = write_service(repo, "one")
    agent = AgentProcess(repo.root, tmp_path, head.address)
    try:
        agent.wait_applied(first)

        def restart_ray(load: SteadyLoad) -> float:
            head.kill()
            head.start()
            restarted = time.monotonic()
            agent.wait("serving again", lambda: load.first_answered_after(restarted) is not None,
                       SERVE_AGAIN_WITHIN_S)
            return time.monotonic() - restarted

        report, recovery_s = under_load(agent.proxy + LOAD_PATH, window_s, restart_ray)
        agent.wait_applied(first)
        log = agent.log_path.read_text()
        events = [c["message"] for c in agent.get("/status")["conditions"]]
    finally:
        agent.stop()
    record_run("7", "Ray restarted under the agent", report, recovery_s, 0,
               "failures only while Ray is down; recovery = Ray up again to first 200")
    assert recovery_s is not None and recovery_s < SERVE_AGAIN_WITHIN_S
    assert "lost Ray at" in log, log[-2000:]
    assert "Traceback" not in log
    assert not re.search(r"\] \w+\.cc:\d+: ", log), "Ray's raw C++ lines in the agent's output"
    assert events
