"""Multi-node model scenario for tests/real/test_models_multinode.py, run in its own process.

A process can join only one Ray, so this runs outside the test session's
Ray: a 3-node `ray.cluster_utils.Cluster` on this machine (a head for the
controller, and two worker nodes, each with its own temporary directory and
so its own model cache, as two machines have), an HTTP server on loopback
holding one model, and the controller starting two replicas on each worker
node. It prints what each node's cache did and how many times the server
sent the model, as one JSON line.
"""

from __future__ import annotations

import asyncio
import hashlib
import http.server
import json
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path

import ray  # noqa: E402
from cluster_scenario import APPS  # a sibling: sets Ray's environment, so before Ray
from ray.cluster_utils import Cluster  # noqa: E402

from controller.client import start_or_connect  # noqa: E402
from vocabulary.replicas.model_stats import CACHE_DIR_NAME, STATS_FILE  # noqa: E402
from vocabulary.spec.backends import BackendConfig, ModelConfig

NAMESPACE = "gitops-models-multinode"
DATA = os.urandom(3 * 1024 * 1024)


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="models-multinode-"))
    served: list[str] = []

    class Model(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object) -> None:
            super().__init__(*args, directory=str(work / "served"))  # type: ignore[arg-type]

        def do_GET(self) -> None:
            served.append(self.path)
            super().do_GET()

        def log_message(self, *args: object) -> None:
            pass

    (work / "served").mkdir()
    (work / "served" / "weights.bin").write_bytes(DATA)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Model)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    temps = {}
    for name in ("a", "b"):
        temp = work / f"node-{name}-tmp"
        temp.mkdir()
        # Each worker node's processes get their own temporary directory: their own default model cache.
        node = cluster.add_node(num_cpus=1, resources={f"node_{name}": 1}, env_vars={"TMPDIR": str(temp)})
        temps[name] = (node.node_id, temp)
    ray.init(address=cluster.address, namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False)
    out: dict = {}
    client = start_or_connect(NAMESPACE, proxy_port=0, options={"tick_s": 0.05, "backoff_base_s": 0.2})
    try:
        model = ModelConfig(name="weights", source=f"http://127.0.0.1:{server.server_address[1]}/weights.bin",
                            sha256=hashlib.sha256(DATA).hexdigest(), load_timeout_s=60)
        goals = []
        for name in ("a", "b"):
            config = BackendConfig(
                name=f"reader-{name}", version="v1+m1", import_path="model_reader:ModelReader", num_replicas=2,
                working_dir=APPS, health_check_period_s=0.5, models=("weights",), model_sources={"weights": model},
                ray_actor_options={"num_cpus": 0, "resources": {f"node_{name}": 0.1}})
            goals.append(asyncio.run(client.apply_backend(config)))
        out["goals"] = [asyncio.run(client.wait_for_goal(goal, 120)).state.value for goal in goals]
        status = asyncio.run(client.get_status())
        out["replica_nodes"] = {
            name: sorted(r.node_id for r in status.backends[f"reader-{name}"].replicas) for name in ("a", "b")
        }
        out["node_ids"] = {name: node_id for name, (node_id, _) in temps.items()}
        stats = {}
        for name, (_, temp) in temps.items():
            path = temp / CACHE_DIR_NAME / STATS_FILE
            stats[name] = json.loads(path.read_text()) if path.exists() else None
        out["stats"] = stats
        out["served"] = len(served)
        out["model_bytes"] = len(DATA)
    finally:
        client.shutdown()
        ray.shutdown()
        cluster.shutdown()
        server.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    sys.exit(main())
