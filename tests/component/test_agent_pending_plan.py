"""The plan of the branch's head that waits unapplied, for the status page (issue 47 item 4):
whatever holds it — the agent suspended, a rollback's quarantine (here an auto-revert's) — its
plan against what runs, with `why` saying which; gone once the head is applied or no longer
loads. (A sync window's hold: tests/component/test_agent_environments.py.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

from gitops.loop.agent import SUSPENDED
from gitops.reconcile.outcomes import Outcome
from gitops.testing import FakeController, MemorySource
from tests.support.agent_loop import make_agent, spec, spec_repo, tick  # noqa: F401 (fixture)


def test_a_suspended_agent_plans_the_head_it_does_not_apply_until_resumed(spec_repo: MemorySource, tmp_path: Path) -> None:
    controller = FakeController()
    agent = make_agent(spec_repo, tmp_path, controller)
    tick(agent)
    agent.suspend()
    asyncio.run(agent.watch_head())
    assert agent.pending_plan() is None  # the head is the applied commit: nothing waits
    spec_repo.write("deployments/echo.toml", spec({"v1": 0.5, "v2": 0.5}))
    waiting = spec_repo.commit("v2 takes half, while suspended")
    asyncio.run(agent.watch_head())
    pending = agent.pending_plan()
    assert pending is not None and (pending.commit, pending.why) == (waiting, SUSPENDED)
    assert '~ endpoint echo\n    traffic: {"v1": 1.0} → {"v1": 0.5, "v2": 0.5}' in pending.text
    assert pending.text.rstrip().endswith("Plan: 0 to create, 1 to update, 0 to delete.")
    assert controller.state.endpoints["echo"].traffic == {"v1": 1.0}  # planned, never applied
    agent.resume()
    assert agent.pending_plan() is None  # "suspended" no longer says why
    assert tick(agent).result is Outcome.APPLIED
    assert agent.pending_plan() is None  # applied: nothing waits


def test_a_suspended_head_that_no_longer_loads_has_no_plan(spec_repo: MemorySource, tmp_path: Path) -> None:
    agent = make_agent(spec_repo, tmp_path, FakeController())
    tick(agent)
    agent.suspend()
    spec_repo.write("deployments/echo.toml", spec({"v2": 1.0}))
    spec_repo.commit("v2 takes over")
    asyncio.run(agent.watch_head())
    assert agent.pending_plan() is not None
    spec_repo.write("deployments/echo.toml", "[endpoints.echo\nroute = ")
    spec_repo.commit("a typo")
    asyncio.run(agent.watch_head())
    assert agent.pending_plan() is None


def test_the_head_an_auto_revert_quarantined_is_planned_until_a_newer_commit_applies(
    spec_repo: MemorySource, tmp_path: Path
) -> None:
    good = spec_repo.head()
    controller = FakeController(failing={"v3": "constructor raised"})
    agent = make_agent(spec_repo, tmp_path, controller, auto_revert=True,
                       quarantine_file=tmp_path / "state" / "quarantine.json")
    tick(agent)
    spec_repo.write("deployments/echo.toml", spec({"v3": 1.0}, backends=("v1", "v3")))
    bad = spec_repo.commit("v3 is broken")
    tick(agent)  # fails, is undone, and quarantined
    assert agent.pending_plan() is None  # the failed attempt itself: not planned again yet
    controller.failing.clear()
    tick(agent)  # the good commit's state
    pending = agent.pending_plan()
    assert pending is not None and pending.commit == bad
    assert pending.why.startswith("quarantined: auto-revert after a failed apply (")
    assert pending.why.endswith(f"{good[:7]} is applied instead until a newer commit arrives")
    assert "+ backend v3" in pending.text and "v3" not in controller.state.backends
    tick(agent, full=False)  # a poll of the same head keeps it
    assert agent.pending_plan() == pending
    spec_repo.write("deployments/echo.toml", spec({"v2": 1.0}))
    fixed = spec_repo.commit("v2 instead")
    assert tick(agent).commit == fixed and agent.pending_plan() is None  # newer, applied: nothing waits


def test_a_manual_rollback_says_so(spec_repo: MemorySource, tmp_path: Path) -> None:
    first = spec_repo.head()
    agent = make_agent(spec_repo, tmp_path, FakeController())
    tick(agent)
    spec_repo.write("deployments/echo.toml", spec({"v2": 1.0}))
    second = spec_repo.commit("v2 takes over")
    tick(agent)
    agent.rollback(first[:7])
    tick(agent)
    pending = agent.pending_plan()
    assert pending is not None and pending.commit == second
    assert pending.why.startswith("quarantined: rolled back by hand (gitops rollback); ")
    assert "~ endpoint echo" in pending.text
