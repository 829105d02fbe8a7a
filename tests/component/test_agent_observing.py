"""Between ticks the agent reads the controller's status every few seconds: a backend
that starts answering 5xx is Degraded within seconds and said once in the log."""

from __future__ import annotations

import asyncio
import logging

from gitops.loop.agent import Trigger
from gitops.testing import FakeController
from tests.support.agent_loop import make_agent, spec_repo, until  # noqa: F401 — spec_repo is a fixture
from vocabulary.control.request_stats import RequestStats


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_backend_errors_show_between_ticks_and_are_logged_once(spec_repo, tmp_path) -> None:
    controller = FakeController()
    log = logging.getLogger("test.agent.observing")
    lines = Lines()
    log.addHandler(lines)
    agent = make_agent(spec_repo, tmp_path, controller, log=log, watch=False, observe_interval_s=0.05)

    async def scenario() -> None:
        runner = asyncio.ensure_future(agent.run())
        try:
            await until(lambda: agent.reconciled.is_set() and agent.status().status.value == "Synced")
            controller.serving = {"v1": RequestStats(requests=8, errors=8)}  # no tick: only the observer sees it
            await until(lambda: agent.status().status.value == "Degraded")
            await asyncio.sleep(0.3)  # several more observations
        finally:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)

    asyncio.run(scenario())
    ready = agent.status().condition("Ready")
    assert ready is not None and ready.reason == "BackendErrors"
    said = [line for line in lines.lines if "answers 5xx" in line]
    assert said == ["backend v1 answers 5xx: 100% of 8 answers were 5xx in the last 60s"]


def test_ready_is_set_once_the_first_tick_is_over(spec_repo, tmp_path) -> None:
    agent = make_agent(spec_repo, tmp_path, FakeController(), watch=False)
    assert not agent.reconciled.is_set()

    async def scenario() -> None:
        runner = asyncio.ensure_future(agent.run())
        try:
            agent.notify(Trigger.SYNC)
            await until(agent.reconciled.is_set)
        finally:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)

    asyncio.run(scenario())
    assert agent.history()  # the first tick was recorded before it said ready


def test_a_rollout_seen_stopping_between_polls_is_recorded_at_once(spec_repo, tmp_path) -> None:
    """The poll is 30 s away; the observer's reading of the abort brings the tick that records it."""
    from gitops.reconcile.outcomes import Outcome
    from tests.support.agent_loop import spec
    from tests.support.rollouts import rollout
    from vocabulary.control.rollouts import RolloutPhase

    controller = FakeController()
    agent = make_agent(spec_repo, tmp_path, controller, watch=False, observe_interval_s=0.05)
    spec_repo.write("deployments/echo.toml", spec({"v1": 0.5, "v2": 0.5}))
    canary = spec_repo.commit("canary")

    async def scenario() -> None:
        runner = asyncio.ensure_future(agent.run())
        try:
            await until(lambda: agent.reconciled.is_set() and bool(agent.history(1)))
            controller.rollouts = {"echo": rollout(RolloutPhase.STEPPING)}
            await asyncio.sleep(0.3)  # seen running: no step passed, nothing to record yet
            assert [e.result for e in agent.history(5)] == [Outcome.APPLIED]
            controller.rollouts = {"echo": rollout(RolloutPhase.ABORTED)}
            await until(lambda: agent.history(1)[0].result is Outcome.ABORTED, timeout_s=5)
        finally:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)

    asyncio.run(scenario())
    assert [(e.commit, e.result) for e in agent.history(2)] == [(canary, Outcome.ABORTED), (canary, Outcome.APPLIED)]
