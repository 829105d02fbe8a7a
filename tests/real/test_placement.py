"""Placement groups on a two-node cluster of logical GPUs (issue 43, item 1).

The scenario runs in a subprocess with its own `ray.cluster_utils.Cluster`
(tests/real/apps/placement_multinode.py); it prints one JSON line that these
tests read. Logical GPUs: Ray schedules them and sets CUDA_VISIBLE_DEVICES as
for real ones; no real GPU was used.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.real

SCRIPT = Path(__file__).parent / "apps" / "placement_multinode.py"
ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def observed() -> dict:
    done = subprocess.run([sys.executable, str(SCRIPT)], cwd=ROOT, capture_output=True, text=True, timeout=420)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"scenario failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def test_each_replica_s_two_gpu_group_is_on_one_node_and_its_worker_runs_inside_it(observed):
    assert observed["tp_goal"] == "met"
    answers, groups = observed["tp_answers"], observed["tp_groups"]
    assert len(answers) == 2 and len(groups) == 2
    for answer in answers:
        group = groups[answer["group"]]
        assert group["state"] == "CREATED" and group["nodes"] == [answer["node"]]  # STRICT_PACK: one node
        assert answer["worker"]["group"] == answer["group"] and answer["worker"]["node"] == answer["node"]
    # Two GPUs a node: the two replicas' groups took one node each.
    assert sorted(a["node"] for a in answers) == observed["gpu_nodes"]


def test_cuda_visible_devices_in_the_replica_and_its_worker_are_the_bundles_gpus(observed):
    for answer in observed["tp_answers"]:
        assert answer["cuda"] == ",".join(answer["gpu_ids"]) and len(answer["gpu_ids"]) == 1
        worker = answer["worker"]["cuda"]
        assert worker and worker != answer["cuda"]  # the other bundle's GPU
        assert sorted([answer["cuda"], worker]) == ["0", "1"]


def test_a_replica_killed_with_sigkill_leaves_no_group_behind(observed):
    assert len(observed["tp_after_kill"]) == 2
    victim_group = observed["tp_answers"][0]["group"]
    assert victim_group not in observed["groups_after_kill"]
    assert len(observed["groups_after_kill"]) == 2  # the survivor's and the replacement's
    assert {a["group"] for a in observed["tp_after_kill"]} == set(observed["groups_after_kill"])
    assert observed["tp_deleted"] == "met" and observed["groups_after_delete"] == {}


def test_strict_spread_puts_one_replica_s_bundles_on_two_nodes(observed):
    assert observed["spread_goal"] == "met"
    [group] = observed["spread_groups"].values()
    assert group["nodes"] == observed["gpu_nodes"]
    [answer] = observed["spread_answers"]
    assert answer["worker"]["node"] != answer["node"]  # the worker ran in the other bundle, on the other node


def test_a_group_no_node_can_hold_is_pending_with_the_reason(observed):
    assert observed["big_pending"] == "Pending: no node offers {GPU: 4} in one bundle set"
    assert observed["big_goal"] == "failed"
    assert observed["groups_at_end"] == {}
