"""The controller asks a rollout's PromQL checks once a step has held, and judges the step on the answers.

In-process `ControllerActor` with a fake adapter and a fake asker standing
in for Prometheus (the real one is tests/real/test_rollout_metrics.py).
"""

from __future__ import annotations

import asyncio

from controller.actor import ControllerActor
from controller.testing import FakeAdapter, MemoryStorage
from vocabulary.configs import BackendConfig, EndpointConfig, MetricCheck, RolloutConfig
from vocabulary.rollouts import MetricQuery, MetricReading, RolloutPhase
from tests.pure.test_goals_api import OPTIONS, poll, stop

CHECK = MetricCheck(name="error-share", query='errors{backend="$backend"}', max=0.1)


class FakePrometheus:
    """Answers every query with `value` (None: unreachable) and remembers what it was asked."""

    def __init__(self, value: float | None) -> None:
        self.value = value
        self.asked: list[str] = []

    async def __call__(self, queries: tuple[MetricQuery, ...]) -> list[tuple[MetricQuery, MetricReading]]:
        self.asked += [query.promql for query in queries]
        error = None if self.value is not None else "Prometheus at 127.0.0.1:9 unreachable (ConnectError)"
        return [
            (q, MetricReading(check=q.check, backend=q.backend, at=1e12, value=self.value, error=error))
            for q in queries
        ]


def endpoint(traffic: dict[str, float]) -> EndpointConfig:
    rollout = RolloutConfig(steps=(0.5, 1.0), step_interval_s=0.05, min_requests=0, metrics=(CHECK,))
    return EndpointConfig(name="api", route="/api", traffic=traffic, rollout=rollout)


async def rolled_out(prometheus: FakePrometheus) -> ControllerActor:
    ctl = ControllerActor("ns", OPTIONS, storage=MemoryStorage(), adapter=FakeAdapter(), asker=prometheus)
    for name in ("v1", "v2"):
        goal = await ctl.apply_backend(BackendConfig(name=name, version="1", import_path="m:f", num_replicas=1))
        await ctl.wait_for_goal(goal, 5.0)
    await ctl.wait_for_goal(await ctl.apply_endpoint(endpoint({"v1": 1.0})), 5.0)
    await ctl.apply_endpoint(endpoint({"v1": 0.5, "v2": 0.5}))
    return ctl


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
