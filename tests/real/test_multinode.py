"""Multi-node behaviour with several raylets on this machine.

The scenario runs in a subprocess with its own `ray.cluster_utils.Cluster`
(a process joins one Ray only, and this session's belongs to `ray_session`);
it prints one JSON line that this test reads.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.real

SCRIPT = Path(__file__).parent / "apps" / "controller_multinode.py"
ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def observed() -> dict:
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], cwd=ROOT, capture_output=True, text=True, timeout=240
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"scenario failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def test_the_controller_starts_one_proxy_per_alive_node(observed):
    assert observed["nodes"] == 3 and observed["proxies_before"] == 3


def test_every_node_s_proxy_is_asked_for_shadow_mismatches_at_its_address_in_status(observed):
    assert len(set(observed["proxy_urls"])) == 3
    assert observed["mismatches_answer"] == {"mismatches": [], "unreachable": []}


def test_a_removed_nodes_proxy_is_dropped(observed):
    assert observed["proxies_after"] == 2
    assert observed["removed_node_has_proxy"] is False


def test_a_replica_on_a_removed_node_is_replaced_on_another_node(observed):
    assert observed["first_goal"] == "met"
    assert observed["replacement_node_differs"] is True
    restarts = observed["restarts"]
    assert restarts.get("node_lost", 0) + restarts.get("died", 0) >= 1, restarts
    assert observed["replica_actors"] == 1


def test_each_node_s_proxies_enforce_their_share_of_a_tenant_limit(observed):
    assert observed["granted_3_nodes"] == [2, 2, 2]  # burst 6 over 3 nodes
    assert observed["granted_2_nodes"] == [3, 3]  # a node left: the two others' shares grew
