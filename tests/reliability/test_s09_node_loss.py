"""Scenario 9: a node lost under load in a multi-node `ray.cluster_utils.Cluster`.

Replicas are re-created on survivors; requests through the surviving
proxies (the head's and a worker's) keep succeeding: 0 failed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.results import ScenarioResult, record

ROOT = Path(__file__).parents[2]


def test_losing_a_node_fails_no_request_through_the_surviving_proxies(window_s: float) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.reliability.multinode_scenario", str(window_s)],
        cwd=ROOT, capture_output=True, text=True, timeout=280,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"scenario failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    observed = json.loads(lines[-1][len("RESULT "):])
    head, worker = observed["via_head"], observed["via_surviving_worker"]
    kinds = {k: head["by_kind"].get(k, 0) + worker["by_kind"].get(k, 0)
             for k in set(head["by_kind"]) | set(worker["by_kind"])}
    record(ScenarioResult("9", "node lost (4-node Cluster), load through surviving proxies",
                          head["requests"] + worker["requests"], head["failed"] + worker["failed"],
                          round(observed["recovery_s"], 2), observed["leaked"], kinds,
                          "recovery = node removed to replacement replica running"))
    assert head["failed"] == 0, head["sample"]
    assert worker["failed"] == 0, worker["sample"]
    assert observed["leaked"] == 0
