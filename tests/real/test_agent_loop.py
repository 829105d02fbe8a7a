"""The reconcile loop on a real git repository, for what only git has: the
ref watch and exports of a commit without `.git`. Everything else the loop
does is tested over an in-memory source in tests/component/test_agent_loop.py."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from gitops.loop.agent import Agent, AgentSettings
from gitops.loop.history import History
from gitops.loop.metrics import AgentMetrics
from gitops.reconcile.planner import plan
from gitops.sources.repos import GitSource
from gitops.specs.loading import Loader
from gitops.testing import FakeController
from tests.support.agent_loop import APP, spec, tick, until

pytestmark = pytest.mark.real

@pytest.fixture
def spec_repo(repo):
    repo.write("deployments/__init__.py", "")
    repo.write("deployments/apps/__init__.py", "")
    repo.write("deployments/apps/echo.py", APP)
    repo.write("deployments/echo.toml", spec({"v1": 1.0}))
    repo.commit("v1 only")
    return repo


def make_agent(spec_repo, tmp_path: Path, controller: FakeController, **settings: Any) -> Agent:
    state_dir = tmp_path / "state"
    return Agent(
        GitSource(str(spec_repo.root), None, state_dir),
        controller,
        History(state_dir / "history.db"),
        load=Loader().load_tree,
        plan=plan,
        metrics=AgentMetrics(),
        settings=AgentSettings(**{"interval_s": 30.0, "resync_interval_s": 60.0, **settings}),
    )


def test_backends_get_the_commits_export_as_working_dir(spec_repo, tmp_path) -> None:
    controller = FakeController()
    tick(make_agent(spec_repo, tmp_path, controller))
    working_dir = Path(controller.state.backends["v1"].working_dir)
    assert (working_dir / "deployments/apps/echo.py").read_text() == APP
    assert not (working_dir / ".git").exists()


def test_a_commit_is_noticed_through_the_ref_watch(spec_repo, tmp_path) -> None:
    controller = FakeController()
    agent = make_agent(spec_repo, tmp_path, controller)

    async def scenario() -> None:
        runner = asyncio.ensure_future(agent.run())
        try:
            await until(lambda: "echo" in controller.state.endpoints)
            await asyncio.sleep(0.2)  # the observer is watching by now
            spec_repo.write("deployments/echo.toml", spec({"v2": 1.0}))
            spec_repo.commit("to v2")
            await until(lambda: controller.state.endpoints["echo"].traffic == {"v2": 1.0}, timeout_s=5)
        finally:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)

    asyncio.run(scenario())
