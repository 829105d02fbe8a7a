"""Scenario 1: kill -9 one replica of a 2-replica backend under load — 0 failed."""

from __future__ import annotations

import time

from tests.support.faults import kill9
from tests.support.load import SteadyLoad
from tests.support.scenario import record_run, under_load
from tests.support.serving import Serving
from tests.support.stack import eventually


def test_killing_one_of_two_replicas_fails_no_request(serving: Serving, backend: str, window_s: float) -> None:
    serving.deploy(backend, 2)
    serving.route(backend)
    [victim, _] = serving.replicas(backend, "RUNNING")

    def kill_one_replica(_: SteadyLoad) -> float:
        started = time.monotonic()
        kill9(serving.replica_handle(victim.replica_id))
        eventually(
            lambda: len(serving.replicas(backend, "RUNNING")) == 2
            and victim.replica_id not in {r.replica_id for r in serving.replicas(backend)},
            60, what="a replacement replica running",
        )
        return time.monotonic() - started

    report, recovery_s = under_load(serving.load_url(backend), window_s, kill_one_replica)
    leaked = serving.leaked()
    record_run("1", "kill -9 one replica of 2", report, recovery_s, leaked)
    assert report.failed == 0, report.summary()
    assert leaked == 0


def test_a_killed_replica_is_reported_in_status_by_backend_replica_and_reason(serving: Serving, backend: str) -> None:
    serving.deploy(backend, 1)
    [victim] = serving.replicas(backend, "RUNNING")
    kill9(serving.replica_handle(victim.replica_id))
    reported = eventually(
        lambda: [f for f in serving.status().replica_failures if f.replica_id == victim.replica_id],
        60, what="the killed replica in status",
    )
    assert [(f.backend, f.reason) for f in reported] == [(backend, "died")]
