"""The reconcile loop driven by hand, for the agent tests of every tier: the echo app and a spec of it,
an in-memory source of them (`spec_repo`), an agent over a fake controller, a tick, a wait, a
metric.

Moved out of tests/component/test_agent_loop.py, whose tests use them too."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from gitops.loop.agent import Agent, AgentSettings, Planner
from gitops.loop.history import History
from gitops.loop.metrics import AgentMetrics
from gitops.reconcile.planner import plan
from gitops.specs.loading import Loader
from gitops.testing import FakeController, MemorySource

APP = '''
class Echo:
    def __init__(self, label):
        self.label = label

    def __call__(self, request):
        return self.label
'''

def spec(traffic: dict[str, float], backends: tuple[str, ...] = ("v1", "v2")) -> str:
    text = ""
    for name in backends:
        text += f'[backends.{name}]\nimport_path = "deployments.apps.echo:Echo"\ninit_args = ["{name}"]\n\n'
    weights = ", ".join(f"{k} = {v}" for k, v in traffic.items())
    return text + f'[endpoints.echo]\nroute = "/echo"\ntraffic = {{ {weights} }}\n'

@pytest.fixture
def spec_repo(tmp_path: Path) -> MemorySource:
    source = MemorySource(tmp_path / "exports")
    source.write("deployments/__init__.py", "")
    source.write("deployments/apps/__init__.py", "")
    source.write("deployments/apps/echo.py", APP)
    source.write("deployments/echo.toml", spec({"v1": 1.0}))
    source.commit("v1 only")
    return source

def make_agent(
    spec_repo: MemorySource, tmp_path: Path, controller: FakeController, *, planner: Planner = plan,
    log: logging.Logger | None = None, **settings: Any,
) -> Agent:
    return Agent(
        spec_repo,
        controller,
        History(tmp_path / "state" / "history.db"),
        load=Loader().load_tree,
        plan=planner,
        metrics=AgentMetrics(),
        settings=AgentSettings(**{"interval_s": 30.0, "resync_interval_s": 60.0, **settings}),
        **({"log": log} if log is not None else {}),
    )

async def until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)

def tick(agent: Agent, full: bool = True):
    return asyncio.run(agent.tick(full=full))

def metric(agent: Agent, name: str) -> float:
    for line in agent.metrics.render().decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not exported")
