"""Scenario 2: kill -9 the controller under load — idle; at each checkpoint
point of a rollout; while old replicas drain; during its own recovery.

0 failed on the data plane, every goal completes, no leaked or duplicate actors.
"""

from __future__ import annotations

import time

import ray

from tests.support.faults import kill9
from tests.support.load import SteadyLoad
from tests.support.scenario import record_run, under_load
from tests.support.serving import Serving
from tests.support.stack import eventually, met
from vocabulary.control.status import ReplicaStatus

DRAIN_S = 3.0
# Requests long enough that an old replica still has some in flight when it drains.
SLOW_REQUEST_S = 0.3
CHECKPOINT_POINTS = ("after_api_checkpoint", "after_checkpoint", "after_effects")


def _back(serving: Serving) -> float:
    """Waits until the restarted controller answers; returns when it did."""
    handle = serving.controller_handle()
    eventually(lambda: ray.get(handle.ping.remote(), timeout=5) == "ok", 60,
               what="the controller answers again", retry_on=(ray.exceptions.RayError,))
    return time.monotonic()


def _after_drains(serving: Serving, backend: str, timeout_s: float = DRAIN_S + 30) -> list[ReplicaStatus]:
    """The backend's replicas once none is draining or stopped (or as they are at `timeout_s`).

    A rollout's goal is met when its live replicas all run the new version; the last old replica
    may still be draining then, for up to its graceful shutdown timeout, and a stopped one is
    listed, STOPPED, until the controller's next tick drops it (CI read one so: v1, v2, v2).
    """
    deadline = time.monotonic() + timeout_s
    while serving.replicas(backend, "SHOULD_STOP", "STOPPING", "STOPPED") and time.monotonic() < deadline:
        time.sleep(0.1)
    return serving.replicas(backend)


def test_an_idle_controller_killed_costs_no_request_and_recovers(serving: Serving, backend: str, window_s: float) -> None:
    serving.deploy(backend, 2)
    serving.route(backend)
    before = {r.replica_id for r in serving.replicas(backend, "RUNNING")}

    def kill_the_controller(_: SteadyLoad) -> float:
        killed = time.monotonic()
        kill9(serving.controller_handle())
        return _back(serving) - killed

    report, recovery_s = under_load(serving.load_url(backend), window_s, kill_the_controller)
    after = {r.replica_id for r in serving.replicas(backend, "RUNNING")}
    leaked = serving.leaked()
    record_run("2a", "kill -9 the idle controller", report, recovery_s, leaked)
    assert report.failed == 0, report.summary()
    assert after == before and leaked == 0


def test_a_controller_killed_at_every_point_of_a_rollout_completes_it_without_failures(
    serving: Serving, backend: str, window_s: float
) -> None:
    serving.deploy(backend, 2, "v1", graceful_shutdown_timeout_s=DRAIN_S)
    serving.route(backend)

    def kill_through_a_rollout(_: SteadyLoad) -> float:
        started = time.monotonic()
        handle = serving.controller_handle()
        ray.get(handle.arm_kill_switch.remote(CHECKPOINT_POINTS[0]))
        goal = serving.apply(backend, 2, "v2", graceful_shutdown_timeout_s=DRAIN_S)
        for point in CHECKPOINT_POINTS[1:]:
            _back(serving)
            ray.get(serving.controller_handle().arm_kill_switch.remote(point))
        eventually(lambda: serving.replicas(backend, "SHOULD_STOP", "STOPPING"), 60, what="an old replica draining")
        kill9(serving.controller_handle())
        _back(serving)
        kill9(serving.controller_handle())  # again, while it recovers from the last kill
        met(serving.client, goal, 120)
        return time.monotonic() - started

    report, rollout_s = under_load(serving.load_url(backend, SLOW_REQUEST_S), window_s, kill_through_a_rollout)
    replicas = _after_drains(serving, backend)
    leaked = serving.leaked()
    record_run("2b", "kill -9 the controller at each point of a rollout, while draining, while recovering",
               report, rollout_s, leaked, "recovery = rollout time with 6 kills")
    assert report.failed == 0, report.summary()
    assert [r.version for r in replicas] == ["v2", "v2"] and leaked == 0
