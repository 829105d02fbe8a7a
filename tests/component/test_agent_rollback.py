"""Rollback: `--auto-revert` (after a failed apply or an aborted rollout) and `gitops rollback` by hand
send the cluster back to the last applied commit; the held commits are not applied again until a newer
commit arrives, across an agent restart."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from gitops.admin.api import build_app
from gitops.reconcile.outcomes import Outcome
from gitops.testing import FakeController, MemorySource
from tests.support.agent_loop import make_agent, metric, spec, spec_repo, tick  # noqa: F401 (fixture)
from vocabulary.control.rollouts import Check, CheckName, Rollout, RolloutPhase
from vocabulary.spec.rollout_config import RolloutConfig


def reverting(spec_repo: MemorySource, tmp_path: Path, controller: FakeController):
    return make_agent(spec_repo, tmp_path, controller, auto_revert=True,
                      quarantine_file=tmp_path / "state" / "quarantine.json")


def results(agent) -> list[tuple[str, Outcome]]:
    return [(entry.commit, entry.result) for entry in reversed(agent.history(20))]


def test_a_failed_apply_goes_back_to_the_last_applied_commit_and_holds_the_bad_one(
    spec_repo: MemorySource, tmp_path: Path
) -> None:
    good = spec_repo.head()
    controller = FakeController(failing={"v3": "constructor raised"})
    agent = reverting(spec_repo, tmp_path, controller)
    tick(agent)
    spec_repo.write("deployments/echo.toml", spec({"v3": 1.0}, backends=("v1", "v3")))
    bad = spec_repo.commit("v3 is broken")
    tick(agent)  # fails, and its changes are undone at once
    assert "v3" not in controller.state.backends
    controller.failing.clear()
    tick(agent)  # the good commit's state: already what runs
    tick(agent)  # the bad head stays held
    assert results(agent) == [(good, Outcome.APPLIED), (bad, Outcome.FAILED), (good, Outcome.NOOP)]
    assert agent.history(1)[0].plan_summary == f"rolled back to {good[:7]} (holding {bad[:7]}): No changes."
    status = agent.status()
    assert (status.status.value, status.watched_revision) == ("Held", bad)
    assert status.condition("Ready").reason == "RolledBack"
    assert set(controller.state.endpoints["echo"].traffic) == {"v1"}
    assert metric(agent, 'gitops_rollbacks_total{reason="apply_failed"}') == 1
    restarted = reverting(spec_repo, tmp_path, controller)
    tick(restarted)
    assert results(restarted)[-1] == (good, Outcome.NOOP) and len(results(restarted)) == 3


def test_a_commit_newer_than_the_held_ones_is_applied_normally(spec_repo: MemorySource, tmp_path: Path) -> None:
    controller = FakeController(failing={"v3": "constructor raised"})
    agent = reverting(spec_repo, tmp_path, controller)
    tick(agent)
    spec_repo.write("deployments/echo.toml", spec({"v3": 1.0}, backends=("v1", "v3")))
    spec_repo.commit("v3 is broken")
    tick(agent)
    controller.failing.clear()
    tick(agent)
    spec_repo.write("deployments/echo.toml", spec({"v2": 1.0}))
    fixed = spec_repo.commit("v2 instead")
    tick(agent)
    assert results(agent)[-1] == (fixed, Outcome.APPLIED)
    assert not (tmp_path / "state" / "quarantine.json").exists()


def test_an_aborted_rollout_goes_back_too(spec_repo: MemorySource, tmp_path: Path) -> None:
    good = spec_repo.head()
    controller = FakeController()
    agent = reverting(spec_repo, tmp_path, controller)
    tick(agent)
    spec_repo.write("deployments/echo.toml", spec({"v2": 1.0}))
    canary = spec_repo.commit("v2 takes over")
    tick(agent)
    broken = Check(name=CheckName.ERROR_RATIO, backend="v2", measured=0.2, threshold=0.01, passed=False)
    controller.rollouts = {"echo": Rollout(endpoint="echo", before={"v1": 1.0}, target={"v2": 1.0},
                                           config=RolloutConfig(), phase=RolloutPhase.ABORTED, step_started_at=0.0,
                                           checks=(broken,))}
    tick(agent, full=False)  # records the abort, reverts
    controller.rollouts = {}
    tick(agent)
    assert results(agent)[-2:] == [(canary, Outcome.ABORTED), (good, Outcome.APPLIED)]
    assert controller.state.endpoints["echo"].traffic == {"v1": 1.0}
    assert metric(agent, 'gitops_rollbacks_total{reason="analysis"}') == 1


def test_gitops_rollback_goes_back_by_hand_through_the_admin_api(spec_repo: MemorySource, tmp_path: Path) -> None:
    first = spec_repo.head()
    controller = FakeController()
    agent = make_agent(spec_repo, tmp_path, controller, quarantine_file=tmp_path / "state" / "quarantine.json")
    tick(agent)
    spec_repo.write("deployments/echo.toml", spec({"v2": 1.0}))
    second = spec_repo.commit("v2 takes over")
    tick(agent)
    app = build_app(agent, sync=lambda: None, webhook_fetch=lambda: None, metrics=lambda: (b"", "text/plain"))

    async def post(path: str) -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            return await client.post(path)

    refused = asyncio.run(post("/rollback?commit=0000000"))
    assert refused.status_code == 409 and "was never applied here" in refused.json()["error"]
    answer = asyncio.run(post("/rollback"))
    assert answer.status_code == 200 and (answer.json()["good"], answer.json()["held"]) == (first, [second])
    tick(agent)
    tick(agent)
    assert results(agent)[-1] == (first, Outcome.APPLIED) and controller.state.endpoints["echo"].traffic == {"v1": 1.0}
    assert metric(agent, 'gitops_rollbacks_total{reason="manual"}') == 1
    # Not Synced: the branch's head is newer than what runs, and held back.
    assert agent.history(1)[0].plan_summary.startswith(f"rolled back to {first[:7]} (holding {second[:7]}): Plan:")
    status = agent.status()
    assert (status.status.value, status.watched_revision, status.last_applied_revision) == ("Held", second, first)
    assert "rolled back to" in status.condition("Ready").message


def test_a_suspended_agent_shows_the_commit_waiting_for_resume(spec_repo: MemorySource, tmp_path: Path) -> None:
    agent = make_agent(spec_repo, tmp_path, FakeController())
    tick(agent)
    applied = spec_repo.head()
    agent.suspend()
    spec_repo.write("deployments/echo.toml", spec({"v2": 1.0}))
    pending = spec_repo.commit("waits for resume")
    asyncio.run(agent.watch_head())
    status = agent.status()
    assert (status.status.value, status.watched_revision, status.last_applied_revision) == (
        "Suspended", pending, applied
    )
