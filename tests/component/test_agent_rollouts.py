"""The agent and the controller's rollouts: an aborted rollout marks the commit aborted, once, with the
numbers; the status says Degraded / RolloutAborted, or Progressing / RollingOut while one runs."""

from __future__ import annotations

from pathlib import Path

from gitops.reconcile.outcomes import Outcome
from gitops.status.rollup import SyncStatus
from gitops.testing import FakeController, MemorySource
from tests.support.agent_loop import make_agent, spec, spec_repo, tick  # noqa: F401 (spec_repo: fixture)
from tests.support.rollouts import rollout
from vocabulary.control.rollouts import Check, CheckName, RolloutPhase, StepRecord


def test_an_aborted_rollout_is_recorded_once_against_the_applied_commit(spec_repo: MemorySource, tmp_path: Path) -> None:
    controller = FakeController()
    agent = make_agent(spec_repo, tmp_path, controller)
    spec_repo.write("deployments/echo.toml", spec({"v1": 0.5, "v2": 0.5}))
    canary = spec_repo.commit("canary")
    assert tick(agent).result is Outcome.APPLIED
    controller.rollouts = {"echo": rollout(RolloutPhase.ABORTED)}
    tick(agent, full=False)
    tick(agent, full=True)
    entries = agent.history(10)
    assert [(e.commit, e.result) for e in entries[:2]] == [(canary, Outcome.ABORTED), (canary, Outcome.APPLIED)]
    assert entries[0].errors == ("endpoint echo: aborted at step 1/3, traffic back: v2: error_ratio 0.2 > 0.01",)
    status = agent.status()
    ready = status.condition("Ready")
    assert status.status is SyncStatus.DEGRADED and ready is not None and ready.reason == "RolloutAborted"
    assert "error_ratio 0.2 > 0.01" in ready.message


def test_a_rollout_under_way_shows_as_progressing_with_its_step(spec_repo: MemorySource, tmp_path: Path) -> None:
    controller = FakeController()
    agent = make_agent(spec_repo, tmp_path, controller)
    tick(agent)
    controller.rollouts = {"echo": rollout(RolloutPhase.STEPPING)}
    tick(agent, full=False)
    status = agent.status()
    ready = status.condition("Ready")
    assert status.status is SyncStatus.PROGRESSING and ready is not None and ready.reason == "RollingOut"
    assert ready.message == "endpoint echo: step 1/3 (10% of the change)"


def test_each_step_passed_is_one_history_row_then_the_abort_its_own(spec_repo: MemorySource, tmp_path: Path) -> None:
    controller = FakeController()
    agent = make_agent(spec_repo, tmp_path, controller)
    spec_repo.write("deployments/echo.toml", spec({"v1": 0.5, "v2": 0.5}))
    canary = spec_repo.commit("canary")
    tick(agent)
    passed = Check(name=CheckName.REQUESTS, backend="v2", measured=30, threshold=20, passed=True)
    first = StepRecord(step=0, weights={"v1": 0.95, "v2": 0.05}, checks=(passed,), at=5.0)
    controller.rollouts = {"echo": rollout(RolloutPhase.STEPPING).model_copy(update={"step": 1, "passed": (first,)})}
    tick(agent, full=False)
    tick(agent, full=True)
    controller.rollouts = {"echo": rollout(RolloutPhase.ABORTED).model_copy(update={"step": 1, "passed": (first,)})}
    tick(agent, full=False)
    entries = agent.history(10)
    assert [(e.commit, e.result) for e in entries[:3]] == [
        (canary, Outcome.ABORTED), (canary, Outcome.STEP), (canary, Outcome.APPLIED)
    ]
    assert entries[1].plan_summary == "endpoint echo: step 1/3 passed at v1 95%, v2 5%: v2: 30 requests >= 20"
