"""Multi-node scenario for tests/real/test_multinode.py, run in its own process.

A process can join only one Ray, so this runs outside the test session's
Ray: it starts a 3-node `ray.cluster_utils.Cluster` on this machine, starts
the controller with a proxy per node, asks every proxy the status names for
its shadow mismatches over Ray (as the agent's `GET /shadow/mismatches` does), places
one replica on a worker node, sends a tenant over an endpoint's `[limits]` to
each node's proxy (each enforces its share), removes that node, does so
again, and prints what it observed as one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid

import httpx  # noqa: E402
import ray  # noqa: E402
from cluster_scenario import APPS, wait  # a sibling: sets Ray's environment, so before Ray
from ray.cluster_utils import Cluster  # noqa: E402

from controller.client import start_or_connect  # noqa: E402
from gitops.admin.shadow_mismatches import collect, proxies_to_ask  # noqa: E402
from vocabulary.control.longpoll import ReplicaState
from vocabulary.control.status import ClusterStatus, ProxyState, ReplicaStatus  # noqa: E402
from vocabulary.spec.backends import BackendConfig
from vocabulary.spec.endpoints import EndpointConfig, LimitsConfig

NAMESPACE = "gitops-multinode"


def status(client) -> ClusterStatus:
    return asyncio.run(client.get_status())


def running_proxies(client) -> list[str]:
    return sorted(n for n, p in status(client).proxies.items() if p.state is ProxyState.RUNNING)


def replicas(client) -> list[ReplicaStatus]:
    return list(status(client).backends["echo"].replicas)


def mismatches_from_every_proxy(client) -> tuple[list[str], dict]:
    """The proxies the agent would ask (by address), and what asking them over Ray gives."""
    proxies = proxies_to_ask(status(client))
    return sorted(proxies), asyncio.run(collect(client.proxy_mismatches, proxies, timeout_s=5.0))


def granted_per_proxy(client, asks: int = 4) -> list[int]:
    """For each node's proxy, a tenant of its own sends `asks` requests at once over the limit: how many pass."""
    granted = []
    for url in sorted(proxies_to_ask(status(client))):
        tenant = uuid.uuid4().hex
        codes = [httpx.get(f"{url}/limited", headers={"x-tenant": tenant}, timeout=10).status_code
                 for _ in range(asks)]
        assert set(codes) <= {200, 429}, codes
        granted.append(codes.count(200))
    return granted


def main() -> None:
    system = {"health_check_period_ms": 500, "health_check_failure_threshold": 3}
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "_system_config": system})
    workers = [cluster.add_node(num_cpus=1, resources={"worker": 1}) for _ in range(2)]
    ray.init(address=cluster.address, namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False)
    out: dict = {}
    client = start_or_connect(NAMESPACE, proxy_port=0, options={
        "tick_s": 0.05, "proxy_check_s": 0.3, "backoff_base_s": 0.2, "backoff_max_s": 1.0})
    try:
        alive = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
        out["nodes"] = len(alive)
        out["proxies_before"] = len(wait(lambda: len(running_proxies(client)) == 3 and running_proxies(client), 40))
        urls, answer = mismatches_from_every_proxy(client)
        out["proxy_urls"], out["mismatches_answer"] = urls, answer
        config = BackendConfig(
            name="echo", version="v1", import_path="controller_apps:Echo", num_replicas=1,
            working_dir=APPS, health_check_period_s=0.5,
            ray_actor_options={"num_cpus": 0, "resources": {"worker": 0.6}})
        goal = asyncio.run(client.apply_backend(config))
        out["first_goal"] = asyncio.run(client.wait_for_goal(goal, 60)).state.value
        # A cluster-wide burst of 6 for each tenant, nothing refilled meanwhile: 2 per node of 3.
        limits = LimitsConfig(requests_per_s=0.001, burst=6, key="header:x-tenant")
        endpoint = EndpointConfig(name="limited", route="/limited", traffic={"echo": 1.0}, limits=limits)
        asyncio.run(client.wait_for_goal(asyncio.run(client.apply_endpoint(endpoint)), 60))
        out["granted_3_nodes"] = granted_per_proxy(client)
        [first] = replicas(client)
        victim = next(w for w in workers if w.node_id == first.node_id)
        cluster.remove_node(victim)
        out["removed_had_replica"] = True

        def replaced():
            now = replicas(client)
            return [r for r in now if r.state is ReplicaState.RUNNING and r.replica_id != first.replica_id]

        [second] = wait(replaced, 60) or [None]
        out["replacement_node_differs"] = second is not None and second.node_id not in ("", first.node_id)
        out["restarts"] = {reason.value: n for reason, n in status(client).backends["echo"].restarts.items()}
        out["proxies_after"] = len(wait(lambda: len(running_proxies(client)) == 2 and running_proxies(client), 40))
        out["removed_node_has_proxy"] = victim.node_id in status(client).proxies
        out["granted_2_nodes"] = wait(lambda: (got := granted_per_proxy(client)) == [3, 3] and got, 30) or \
            granted_per_proxy(client)
        names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                 if a["namespace"] == NAMESPACE and a["name"].startswith("gitops-replica-")]
        out["replica_actors"] = len(names)
    finally:
        client.shutdown()
        ray.shutdown()
        cluster.shutdown()
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    sys.exit(main())
