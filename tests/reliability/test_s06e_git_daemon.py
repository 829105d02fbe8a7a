"""Scenario 6e: the watched branch deleted on a `git daemon` remote.

Serving goes on with 0 failed requests, status says the branch is missing
(`BranchNotFound`), and a push that brings the branch back is applied. In a
module of its own: its agent must not share the controller with the agent
of test_s06_git's remote (one agent per controller).
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import GitRepo
from tests.support.agents import write_service
from tests.support.gitfaults import World, break_and_recover, start_agent
from tests.support.gitservers import GitDaemon, Remote


def test_a_deleted_branch_keeps_serving_and_recovers_when_pushed_again(
    ray_session: str, tmp_path: Path, window_s: float
) -> None:
    work = GitRepo(tmp_path / "work")
    remote = Remote(tmp_path, work)
    first = write_service(work, "one")
    remote.push()
    daemon = GitDaemon(tmp_path)
    agent = start_agent(daemon.url("remote.git"), tmp_path / "agent")
    try:
        agent.wait_applied(first)
        break_and_recover(World(work, remote, agent), "6e", "git branch deleted (git daemon)", window_s,
                           remote.delete_branch, lambda: None, reason="BranchNotFound")
    finally:
        agent.stop()
        daemon.stop()
