"""Scenario 3: a code rollout (rolling update) of a 2- and a 4-replica backend
under keep-alive load — 0 failed, not one connection reset."""

from __future__ import annotations

import time

import pytest

from tests.support.load import SteadyLoad
from tests.support.scenario import record_run, under_load
from tests.support.serving import Serving
from tests.support.stack import met


@pytest.mark.parametrize(("replicas", "row"), [(2, "3a"), (4, "3b")])
def test_a_rolling_update_fails_no_request_on_keep_alive_connections(
    serving: Serving, backend: str, window_s: float, replicas: int, row: str
) -> None:
    serving.deploy(backend, replicas, "v1", graceful_shutdown_timeout_s=2.0)
    serving.route(backend)

    def roll_out(_: SteadyLoad) -> float:
        started = time.monotonic()
        met(serving.client, serving.apply(backend, replicas, "v2", graceful_shutdown_timeout_s=2.0), 120)
        return time.monotonic() - started

    report, rollout_s = under_load(serving.load_url(backend), window_s, roll_out)
    versions = {r.version for r in serving.replicas(backend, "RUNNING")}
    leaked = serving.leaked()
    record_run(row, f"rolling update of {replicas} replicas", report, rollout_s, leaked, "recovery = rollout time")
    assert report.failed == 0, report.summary()
    assert versions == {"v2"} and leaked == 0
