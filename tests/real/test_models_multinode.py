"""Models on two nodes (several raylets on this machine, each with its own cache):
each node fetches a model once, however many replicas there need it.

The scenario runs in a subprocess with its own `ray.cluster_utils.Cluster`
(`apps/models_multinode.py`); it prints one JSON line that this test reads.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.real

SCRIPT = Path(__file__).parent / "apps" / "models_multinode.py"
ROOT = Path(__file__).parents[2]


def test_each_node_fetches_a_model_once_for_all_its_replicas() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT)], cwd=ROOT, capture_output=True, text=True, timeout=400)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"scenario failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    observed = json.loads(lines[-1][len("RESULT "):])
    assert observed["goals"] == ["met", "met"], observed
    # Two replicas on each worker node, the nodes apart.
    for name in ("a", "b"):
        assert observed["replica_nodes"][name] == [observed["node_ids"][name]] * 2, observed
    # Each node's cache fetched the model once (its bytes once), the other replica hit the cache.
    for name in ("a", "b"):
        stats = observed["stats"][name]
        assert stats is not None, observed
        assert stats["fetches"] == {"weights": 1} and stats["fetch_bytes"] == {"weights": observed["model_bytes"]}
        assert stats["hits"] == 1
    assert observed["served"] == 2  # the server sent it once per node
