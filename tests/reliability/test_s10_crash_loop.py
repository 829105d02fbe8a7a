"""Scenario 10: a new version that crash-loops — raising in `__init__`, or
starting and then failing its health checks.

The old version keeps serving with 0 failed requests, replica creations are
bounded (no hot loop), the goal fails with the replica's own message.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.support.load import SteadyLoad
from tests.support.scenario import record_run, under_load
from tests.support.serving import Serving
from tests.support.stack import run
from vocabulary.control.goals import GoalResult, GoalState

WATCH_S = 5.0
# With the test backoff (0.2 s doubling to 1 s) a crash loop restarts at most
# about once a second; a hot loop would start dozens.
MAX_CREATIONS = 10


def _creations(serving: Serving, backend: str) -> int:
    return sum(serving.status().backends[backend].restarts.values())


def _crash_loop(
    serving: Serving, backend: str, window_s: float, row: str, title: str, **new_version: object
) -> GoalResult:
    serving.deploy(backend, 2, "v1")
    serving.route(backend)
    outcome: dict[str, object] = {}

    def roll_out_a_broken_version(_: SteadyLoad) -> None:
        goal = serving.apply(backend, 2, "v2", **new_version)
        outcome["goal"] = run(serving.client.wait_for_goal(goal, 60))
        before = _creations(serving, backend)
        time.sleep(WATCH_S)  # count creations over a fixed span: the rate is the point
        outcome["creations"] = _creations(serving, backend) - before
        return None

    report, _ = under_load(serving.load_url(backend), window_s, roll_out_a_broken_version)
    serving_versions = {r.version for r in serving.replicas(backend, "RUNNING")}
    leaked = serving.leaked()
    record_run(row, title, report, None, leaked, f"{outcome['creations']} replica starts in {WATCH_S:g} s")
    goal = outcome["goal"]
    assert report.failed == 0, report.summary()
    assert goal.state == GoalState.FAILED, goal  # type: ignore[union-attr]  # the outcome holds the goal result here
    assert "v1" in serving_versions
    assert outcome["creations"] <= MAX_CREATIONS  # type: ignore[operator]  # the outcome's values are ints here
    assert leaked == 0
    return goal  # type: ignore[return-value]  # the outcome holds the goal result here


def test_a_version_raising_in_init_fails_its_goal_with_the_message_and_the_old_one_serves(
    serving: Serving, backend: str, window_s: float
) -> None:
    goal = _crash_loop(serving, backend, window_s, "10a", "new version raises in __init__",
                       import_path="controller_apps:Broken", init_args=())
    assert "model file missing: weights.bin" in goal.reason


def test_a_version_failing_health_checks_fails_its_goal_and_the_old_one_serves(
    serving: Serving, backend: str, window_s: float, tmp_path: Path
) -> None:
    marker = tmp_path / "unhealthy"
    marker.touch()
    goal = _crash_loop(serving, backend, window_s, "10b", "new version fails its health checks",
                       user_config={"unhealthy_if": str(marker)})
    assert "unhealthy" in goal.reason
