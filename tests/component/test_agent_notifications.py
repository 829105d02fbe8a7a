"""What the agent announces as it happens: a new commit seen, then applying, before its result; after a
rollback, the reverted commit rolled back and every other held commit quarantined."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gitops.loop.agent import Agent, AgentSettings
from gitops.loop.history import History
from gitops.loop.metrics import AgentMetrics
from gitops.notifications.events import EventKind
from gitops.reconcile.planner import plan
from gitops.specs.loading import Loader
from gitops.testing import FakeController, MemorySource
from tests.support.agent_loop import spec, spec_repo, tick  # noqa: F401 (spec_repo: fixture)
from tests.support.notifiers import RecordingNotifier


def agent_with(spec_repo: MemorySource, tmp_path: Path, controller: FakeController, **settings: Any):
    notifier = RecordingNotifier()
    agent = Agent(
        spec_repo, controller, History(tmp_path / "state" / "history.db"), load=Loader().load_tree, plan=plan,
        metrics=AgentMetrics(), notifier=notifier,  # type: ignore[arg-type]  # a fake notifier
        settings=AgentSettings(interval_s=30.0, resync_interval_s=60.0,
                               quarantine_file=tmp_path / "state" / "quarantine.json", **settings),
    )
    return agent, notifier


def test_a_new_commit_is_announced_seen_then_applying_then_applied(spec_repo: MemorySource, tmp_path: Path) -> None:
    agent, notifier = agent_with(spec_repo, tmp_path, FakeController())
    tick(agent)
    spec_repo.write("deployments/echo.toml", spec({"v2": 1.0}))
    second = spec_repo.commit("v2 takes over")
    tick(agent)
    tick(agent)
    assert notifier.kinds(second) == [EventKind.SEEN, EventKind.APPLYING, EventKind.APPLIED]


def test_an_invalid_commit_is_seen_but_never_applying(spec_repo: MemorySource, tmp_path: Path) -> None:
    agent, notifier = agent_with(spec_repo, tmp_path, FakeController())
    tick(agent)
    spec_repo.write("deployments/echo.toml", "[backends.x]\nnum_replicas = -1\n")
    bad = spec_repo.commit("broken")
    tick(agent)
    assert notifier.kinds(bad) == [EventKind.SEEN, EventKind.INVALID]


def test_an_auto_revert_announces_the_failed_commit_rolled_back(spec_repo: MemorySource, tmp_path: Path) -> None:
    good = spec_repo.head()
    controller = FakeController(failing={"v3": "constructor raised"})
    agent, notifier = agent_with(spec_repo, tmp_path, controller, auto_revert=True)
    tick(agent)
    spec_repo.write("deployments/echo.toml", spec({"v3": 1.0}, backends=("v1", "v3")))
    bad = spec_repo.commit("v3 is broken")
    tick(agent)
    assert notifier.kinds(bad)[-2:] == [EventKind.APPLY_FAILED, EventKind.ROLLED_BACK]
    rolled = notifier.events[-1]
    assert rolled.errors == (f"back to {good[:7]} (apply_failed); not applied again until a newer commit",)


def test_a_rollback_by_hand_quarantines_each_other_newer_commit(spec_repo: MemorySource, tmp_path: Path) -> None:
    first = spec_repo.head()
    agent, notifier = agent_with(spec_repo, tmp_path, FakeController())
    tick(agent)
    spec_repo.write("deployments/echo.toml", spec({"v2": 1.0}))
    second = spec_repo.commit("v2 takes over")
    tick(agent)
    spec_repo.write("deployments/echo.toml", spec({"v1": 0.5, "v2": 0.5}))
    third = spec_repo.commit("half and half")
    tick(agent)
    agent.rollback(first)
    announced = [(event.kind, event.commit) for event in notifier.events[-2:]]
    assert announced == [(EventKind.ROLLED_BACK, third), (EventKind.COMMIT_QUARANTINED, second)]
    assert notifier.events[-1].errors == (f"held back with {third[:7]} (manual)",)
