"""The rolling-update and scaling step as a table: live replicas in, decisions out."""

from __future__ import annotations

import pytest

from controller.state.backend_state import ReplicaRecord, ScaleDecisions, StopDecision, scale_decisions
from vocabulary.control.longpoll import ReplicaState

S = ReplicaState
# Each replica is (id, version, state); the backend wants `target` of version "v2".
CASES = [
    # name, replicas, target, limits, stopped (id, force), started
    ("new backend starts its whole target", [], 2, {}, [], 2),
    ("steady state does nothing", [("a", "v2", S.RUNNING), ("b", "v2", S.RUNNING)], 2, {}, [], 0),
    ("update surges one new replica, keeps every old one",
     [("a", "v1", S.RUNNING), ("b", "v1", S.RUNNING)], 2, {}, [], 1),
    ("update waits while the surge replica starts",
     [("a", "v1", S.RUNNING), ("b", "v1", S.RUNNING), ("c", "v2", S.STARTING)], 2, {}, [], 0),
    ("a running new replica lets one old one drain and the next start",
     [("a", "v1", S.RUNNING), ("b", "v1", S.RUNNING), ("c", "v2", S.RUNNING)], 2, {},
     [("b", False)], 1),
    ("update ends by draining the last old replica",
     [("a", "v1", S.RUNNING), ("c", "v2", S.RUNNING), ("d", "v2", S.RUNNING)], 2, {},
     [("a", False)], 0),
    ("old replicas not yet running are killed at once",
     [("a", "v1", S.STARTING), ("b", "v1", S.SHOULD_START)], 1, {}, [("a", True), ("b", True)], 1),
    ("scale down drains extra running replicas",
     [("a", "v2", S.RUNNING), ("b", "v2", S.RUNNING), ("c", "v2", S.RUNNING)], 1, {},
     [("a", False), ("b", False)], 0),
    ("scale down drops unstarted replicas first, and kills them",
     [("a", "v2", S.RUNNING), ("b", "v2", S.STARTING), ("c", "v2", S.SHOULD_START)], 1, {},
     [("c", True), ("b", True)], 0),
    ("target zero drains old replicas and starts nothing",
     [("a", "v1", S.RUNNING), ("b", "v1", S.RUNNING)], 0, {}, [("a", False), ("b", False)], 0),
    ("max_surge 2 starts two new replicas beside the old ones",
     [("a", "v1", S.RUNNING), ("b", "v1", S.RUNNING)], 2, {"max_surge": 2}, [], 2),
    ("max_unavailable 1 drains one old replica before any new one runs",
     [("a", "v1", S.RUNNING), ("b", "v1", S.RUNNING)], 2, {"max_unavailable": 1}, [("b", False)], 2),
]


@pytest.mark.parametrize("name,replicas,target,limits,stopped,started", CASES, ids=[c[0] for c in CASES])
def test_scaling_step(name, replicas, target, limits, stopped, started):
    records = [ReplicaRecord(rid, version, state) for rid, version, state in replicas]
    decisions = scale_decisions(records, target, "v2", **limits)
    expected = ScaleDecisions(tuple(StopDecision(rid, force) for rid, force in stopped), started)
    assert decisions == expected


def test_default_limits_are_surge_one_unavailable_zero():
    old = [ReplicaRecord(rid, "v1", S.RUNNING) for rid in "ab"]
    assert scale_decisions(old, 2, "v2") == scale_decisions(old, 2, "v2", max_surge=1, max_unavailable=0)
