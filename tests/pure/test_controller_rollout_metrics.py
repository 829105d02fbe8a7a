"""The controller asks a rollout's PromQL checks once a step has held, and judges the step on the answers.

It asks the Prometheus the agent set last (`set_prometheus_url`, sent at each
agent start), also when the controller was already running, and keeps it
across its own restarts.

In-process `ControllerActor` with a fake adapter and a fake asker standing
in for Prometheus (the real one is tests/real/test_rollout_metrics.py).
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from controller.actor import ControllerActor
from controller.persistence.checkpoint import Storage
from controller.testing import FakeAdapter, MemoryStorage
from tests.support.goals import OPTIONS, poll, stop
from vocabulary.control.rollouts import MetricQuery, MetricReading, RolloutPhase
from vocabulary.spec.backends import BackendConfig
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.rollout_config import MetricCheck, RolloutConfig

CHECK = MetricCheck(name="error-share", query='errors{backend="$backend"}', max=0.1)


class FakePrometheus:
    """Answers every query with `value` (None: unreachable) and remembers what it was asked, and where."""

    def __init__(self, value: float | None) -> None:
        self.value = value
        self.asked: list[str] = []
        self.urls: list[str | None] = []  # the base URL of each batch

    async def __call__(
        self, base_url: str | None, queries: tuple[MetricQuery, ...]
    ) -> list[tuple[MetricQuery, MetricReading]]:
        self.asked += [query.promql for query in queries]
        self.urls.append(base_url)
        error = None if self.value is not None else "Prometheus at 127.0.0.1:9 unreachable (ConnectError)"
        return [
            (q, MetricReading(check=q.check, backend=q.backend, at=1e12, value=self.value, error=error))
            for q in queries
        ]


def endpoint(traffic: dict[str, float]) -> EndpointConfig:
    rollout = RolloutConfig(steps=(0.5, 1.0), step_interval_s=0.05, min_requests=0, metrics=(CHECK,))
    return EndpointConfig(name="api", route="/api", traffic=traffic, rollout=rollout)


async def rolled_out(prometheus: FakePrometheus, ctl: ControllerActor | None = None) -> ControllerActor:
    """`ctl` (default: a new controller with no Prometheus set) rolling `api` out from v1 to v2."""
    ctl = ctl or controller(prometheus, MemoryStorage())
    for name in ("v1", "v2"):
        goal = await ctl.apply_backend(BackendConfig(name=name, version="1", import_path="m:f", num_replicas=1))
        await ctl.wait_for_goal(goal, 5.0)
    await ctl.wait_for_goal(await ctl.apply_endpoint(endpoint({"v1": 1.0})), 5.0)
    await ctl.apply_endpoint(endpoint({"v1": 0.5, "v2": 0.5}))
    return ctl


def controller(prometheus: FakePrometheus, storage: Storage, url: str | None = None) -> ControllerActor:
    return ControllerActor("ns", {**OPTIONS, "prometheus_url": url}, storage=storage, adapter=FakeAdapter(),
                           asker=prometheus)


def test_a_running_controller_asks_the_prometheus_the_agent_set_at_its_start() -> None:
    async def scenario() -> None:
        prometheus = FakePrometheus(0.0)
        ctl = controller(prometheus, MemoryStorage(), url="http://old:9090")
        await ctl.set_prometheus_url("http://new:9090")
        await rolled_out(prometheus, ctl)
        await poll(ctl, lambda s: prometheus.urls)
        await stop(ctl)
        assert set(prometheus.urls) == {"http://new:9090"}

    asyncio.run(scenario())


def test_a_restarted_controller_keeps_the_prometheus_the_agent_set() -> None:
    async def scenario() -> None:
        storage = MemoryStorage()
        first = controller(FakePrometheus(0.0), storage, url="http://old:9090")
        await first.set_prometheus_url("http://new:9090")
        await stop(first)
        prometheus = FakePrometheus(0.0)
        restarted = controller(prometheus, storage, url="http://old:9090")  # Ray restarts it with its first options
        await rolled_out(prometheus, restarted)
        await poll(restarted, lambda s: prometheus.urls)
        await stop(restarted)
        assert set(prometheus.urls) == {"http://new:9090"}

    asyncio.run(scenario())


def test_a_promql_check_out_of_bounds_aborts_the_rollout_and_is_counted_by_its_name() -> None:
    async def scenario() -> None:
        prometheus = FakePrometheus(0.5)
        ctl = await rolled_out(prometheus)
        status = await poll(ctl, lambda s: s.rollouts["api"].phase is RolloutPhase.ABORTED)
        await stop(ctl)
        assert prometheus.asked[0] == 'errors{backend="v2"}'
        assert status.endpoints["api"].traffic == {"v1": 1.0, "v2": 0.0}
        assert [(c.check, c.result) for c in status.rollout_checks if c.check == "error-share"] == [
            ("error-share", "fail")
        ]

    asyncio.run(scenario())


def test_an_unreachable_prometheus_holds_the_step_visibly_in_status() -> None:
    async def scenario() -> None:
        ctl = await rolled_out(FakePrometheus(None))
        status = await poll(ctl, lambda s: s.rollouts["api"].analysis_error is not None)
        await stop(ctl)
        held = status.rollouts["api"]
        assert held.phase is RolloutPhase.STEPPING and held.step == 0
        assert "held: metric check error-share for v2: Prometheus at 127.0.0.1:9 unreachable" in held.message()

    asyncio.run(scenario())


def test_a_new_prometheus_url_is_logged_without_its_credentials(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        ctl = controller(FakePrometheus(0.0), MemoryStorage())
        with caplog.at_level(logging.INFO, logger="controller.loop"):
            await ctl.set_prometheus_url("http://scraper:s3cret@prom:9090")
        await stop(ctl)

    asyncio.run(scenario())
    assert "now ask Prometheus at prom:9090" in caplog.text and "s3cret" not in caplog.text
