"""Placement scenario for tests/real/test_placement.py, run in its own process.

A process can join only one Ray, so this runs outside the test session's Ray:
a `ray.cluster_utils.Cluster` of a head without GPUs and two nodes of two
logical GPUs each (Ray schedules and isolates them, CUDA_VISIBLE_DEVICES
included, as it does real ones). It deploys backends with [placement] and
max_replicas_per_node, reads where their replicas and groups landed (the
replicas' own answers, Ray's placement group table), kills a replica's process
with SIGKILL, and prints what it observed as one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

import ray  # noqa: E402
from cluster_scenario import APPS, wait  # a sibling: sets Ray's environment, so before Ray
from ray.cluster_utils import Cluster  # noqa: E402

from controller.client import start_or_connect  # noqa: E402
from controller.state.backend_state import REPLICA_PREFIX  # noqa: E402
from vocabulary.control.longpoll import ReplicaState  # noqa: E402
from vocabulary.request_path.wire import make_request  # noqa: E402
from vocabulary.spec.backends import BackendConfig  # noqa: E402
from vocabulary.spec.placement import PlacementConfig  # noqa: E402

NAMESPACE = f"gitops-placement-{os.getpid()}"


def backend(name: str, bundles: list[dict], strategy: str = "PACK", replicas: int = 1, **extra) -> BackendConfig:
    return BackendConfig(
        name=name, version="v1", import_path="placement_apps:Engine", num_replicas=replicas, working_dir=APPS,
        health_check_period_s=0.5, graceful_shutdown_timeout_s=0.5, startup_timeout_s=60,
        ray_actor_options={"num_gpus": 1}, placement=PlacementConfig(bundles=tuple(bundles), strategy=strategy),
        **extra)


def running(client, name: str) -> list[str]:
    status = asyncio.run(client.get_status())
    replicas = status.backends[name].replicas if name in status.backends else ()
    return sorted(r.replica_id for r in replicas if r.state is ReplicaState.RUNNING)


def ask(replica_id: str) -> dict:
    handle = ray.get_actor(REPLICA_PREFIX + replica_id, namespace=NAMESPACE)
    status, _, body = ray.get(handle.handle_request.remote(make_request("GET", "/")), timeout=30)
    assert status == 200, body
    return json.loads(body)


def groups() -> dict[str, dict]:
    """This namespace's placement groups that are not removed, by id: their state and each bundle's node."""
    table = ray.util.placement_group_table()
    return {
        group_id: {"state": g["state"], "nodes": sorted(set(g["bundles_to_node_id"].values())), "name": g["name"]}
        for group_id, g in table.items()
        if g["state"] != "REMOVED" and g["name"].startswith(NAMESPACE + "/")
    }


def settled(count: int) -> dict[str, dict] | None:
    """The groups once there are `count`, each CREATED (for none: a truthy stand-in, to end a wait)."""
    now = groups()
    if len(now) == count and all(g["state"] == "CREATED" for g in now.values()):
        return now if now else {"": {}}
    return None


def apply(client, config: BackendConfig, timeout_s: float = 90) -> str:
    goal = asyncio.run(client.apply_backend(config))
    return asyncio.run(client.wait_for_goal(goal, timeout_s)).state.value


def delete(client, name: str) -> str:
    goal = asyncio.run(client.delete_backend(name))
    return asyncio.run(client.wait_for_goal(goal, 60)).state.value


def main() -> None:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "num_gpus": 0, "include_dashboard": False})
    gpu_nodes = [cluster.add_node(num_cpus=2, num_gpus=2) for _ in range(2)]
    ray.init(address=cluster.address, namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False)
    out: dict = {"gpu_nodes": sorted(n.node_id for n in gpu_nodes)}
    client = start_or_connect(NAMESPACE, proxy_port=0, options={
        "tick_s": 0.05, "proxy_class": None, "backoff_base_s": 0.2, "backoff_max_s": 1.0})
    try:
        # 1. Two replicas of a TP = 2 engine: each group of two 1-GPU bundles on one node.
        out["tp_goal"] = apply(client, backend("tp", [{"GPU": 1}, {"GPU": 1}], "STRICT_PACK", replicas=2))
        out["tp_answers"] = [ask(r) for r in running(client, "tp")]
        out["tp_groups"] = groups()
        # 2. kill -9 of one replica's process: replaced, its group removed, none leaked.
        victim = out["tp_answers"][0]
        os.kill(victim["pid"], signal.SIGKILL)
        before = set(running(client, "tp"))

        def replaced() -> list[str]:
            now = running(client, "tp")
            return now if len(now) == 2 and now != sorted(before) else []

        after = wait(replaced, 90)
        out["tp_after_kill"] = [ask(r) for r in after] if after else []
        out["groups_after_kill"] = wait(lambda: settled(2), 30) or groups()
        out["tp_deleted"] = delete(client, "tp")
        wait(lambda: settled(0), 30)
        out["groups_after_delete"] = groups()
        # 3. STRICT_SPREAD: one replica's two bundles on two nodes; its worker on the other node.
        out["spread_goal"] = apply(client, backend("spread", [{"GPU": 1}, {"GPU": 1}], "STRICT_SPREAD"))
        out["spread_groups"] = groups()
        out["spread_answers"] = [ask(r) for r in running(client, "spread")]
        delete(client, "spread")
        # 5. A group no node can hold says so in the status instead of waiting silently.
        goal = asyncio.run(client.apply_backend(backend("big", [{"GPU": 1}] * 4, "STRICT_PACK")))
        out["big_pending"] = wait(lambda: asyncio.run(client.get_status()).backends["big"].pending, 20)
        out["big_goal"] = asyncio.run(client.wait_for_goal(goal, 30)).state.value
        delete(client, "big")
        wait(lambda: settled(0), 30)
        out["groups_at_end"] = groups()
    finally:
        client.shutdown()
        ray.shutdown()
        cluster.shutdown()
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    sys.exit(main())
