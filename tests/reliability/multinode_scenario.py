"""Scenario 9's cluster, run in a process of its own: node loss under load.

A process joins one Ray only (the test session's belongs to `ray_session`),
so this runs a 4-node `ray.cluster_utils.Cluster` (a head and three workers)
itself, serves a 2-replica backend (at most one replica per worker), loads
it through the head's proxy and a surviving worker's proxy, removes the
node of one replica, and prints its numbers as one `RESULT {json}` line.

    python -m tests.reliability.multinode_scenario WINDOW_S
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

for _key, _value in {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "0"}.items():
    os.environ.setdefault(_key, _value)

import ray
from ray.cluster_utils import Cluster

from controller.client import ControllerClient, start_or_connect
from controller.state.proxy_fleet import proxy_actor_name
from tests.support.faults import leaked_replicas
from tests.support.load import LoadReport, SteadyLoad
from tests.support.stack import APPS, FAST_CONTROLLER_OPTIONS, eventually
from vocabulary.control.goals import GoalState
from vocabulary.control.status import ClusterStatus, ReplicaStatus
from vocabulary.spec.backends import BackendConfig
from vocabulary.spec.endpoints import EndpointConfig

NAMESPACE = "gitops-reliability-multinode"


def _status(client: ControllerClient) -> ClusterStatus:
    return asyncio.run(client.get_status())


def _running(client: ControllerClient) -> list[ReplicaStatus]:
    return [r for r in _status(client).backends["svc"].replicas if r.state == "RUNNING"]


def _met(client: ControllerClient, goal: str) -> None:
    result = asyncio.run(client.wait_for_goal(goal, 90))
    assert result.state == GoalState.MET, result


def _proxy_url(node_id: str) -> str:
    handle = ray.get_actor(proxy_actor_name(node_id), namespace=NAMESPACE)
    return "http://" + ray.get(handle.ready.remote(), timeout=60) + "/svc?sleep=0.01"


def _serve(client: ControllerClient) -> None:
    config = BackendConfig(
        name="svc", version="v1", import_path="controller_apps:Echo", num_replicas=2, working_dir=APPS,
        health_check_period_s=0.5, graceful_shutdown_timeout_s=1.0,
        ray_actor_options={"num_cpus": 0, "resources": {"worker": 0.6}},  # one per worker node
    )
    _met(client, asyncio.run(client.apply_backend(config)))
    _met(client, asyncio.run(client.apply_endpoint(EndpointConfig(name="svc", route="/svc", traffic={"svc": 1.0}))))


def _numbers(report: LoadReport) -> dict[str, Any]:
    return {"requests": report.requests, "failed": report.failed, "by_kind": report.by_kind(),
            "sample": report.summary()}


def run_scenario(cluster: Cluster, workers: list[Any], window_s: float) -> dict[str, Any]:
    client = start_or_connect(NAMESPACE, proxy_port=0, options=dict(FAST_CONTROLLER_OPTIONS))
    try:
        _serve(client)
        victim_node = _running(client)[0].node_id
        victim = next(w for w in workers if w.node_id == victim_node)
        survivor = next(w for w in workers if w.node_id != victim_node)
        head_url = _proxy_url(ray.get_runtime_context().get_node_id())
        worker_url = _proxy_url(survivor.node_id)
        with SteadyLoad(head_url, clients=4) as via_head, SteadyLoad(worker_url, clients=4) as via_worker:
            eventually(lambda: via_head.last_success() and via_worker.last_success(), 30)
            time.sleep(window_s)  # steady load before the fault
            removed = time.monotonic()
            cluster.remove_node(victim)
            eventually(lambda: len(_running(client)) == 2 and victim_node not in {r.node_id for r in _running(client)},
                       120, interval_s=0.2, what="a replacement replica on a surviving node")
            recovery_s = time.monotonic() - removed
            time.sleep(window_s)  # and after recovery
            head_report, worker_report = via_head.stop(), via_worker.stop()
        return {
            "via_head": _numbers(head_report), "via_surviving_worker": _numbers(worker_report),
            "recovery_s": recovery_s, "leaked": leaked_replicas(NAMESPACE, _status(client)),
        }
    finally:
        client.shutdown()


def main(window_s: float) -> None:
    temp_dir = tempfile.mkdtemp(prefix="rgm-", dir="/tmp")  # never the shared /tmp/ray
    system = {"health_check_period_ms": 500, "health_check_failure_threshold": 3}
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "_system_config": system, "temp_dir": temp_dir})
    try:
        workers = [cluster.add_node(num_cpus=1, resources={"worker": 1}) for _ in range(3)]
        ray.init(address=cluster.address, namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False)
        result = run_scenario(cluster, workers, window_s)
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 1.0)
