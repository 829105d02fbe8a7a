"""Cross-node data path scenario for tests/real/test_data_tcp.py, run in its own process.

A process can join only one Ray, so this runs outside the test session's Ray:
a 2-node `ray.cluster_utils.Cluster` on this machine, the controller with a
proxy per node, and one replica on the worker node. Requests sent to the
head node's proxy reach that replica as frames over its TCP listener (the
replica counts its proven TCP connections and the requests they carried). It
prints what it observed as one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import sys

import httpx
import ray
from cluster_scenario import APPS, wait  # a sibling: sets Ray's environment, so before Ray
from ray.cluster_utils import Cluster

from controller.client import start_or_connect
from controller.state.backend_state import REPLICA_PREFIX
from vocabulary.control.status import ProxyState
from vocabulary.spec.backends import BackendConfig
from vocabulary.spec.endpoints import EndpointConfig

NAMESPACE = "gitops-data-tcp"


def main() -> None:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    worker = cluster.add_node(num_cpus=1, resources={"worker": 1})
    ray.init(address=cluster.address, namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False)
    out: dict = {}
    client = start_or_connect(NAMESPACE, proxy_port=0, options={
        "tick_s": 0.05, "proxy_check_s": 0.3, "backoff_base_s": 0.2, "backoff_max_s": 1.0})
    try:
        head = cluster.head_node.node_id

        def status():
            return asyncio.run(client.get_status())

        def head_proxy() -> str | None:
            proxy = status().proxies.get(head)
            return proxy.address if proxy is not None and proxy.state is ProxyState.RUNNING else None

        address = wait(head_proxy, 60)
        out["head_proxy"] = bool(address)
        backend = BackendConfig(
            name="echo", version="v1", import_path="controller_apps:Echo", num_replicas=1,
            working_dir=APPS, health_check_period_s=0.5,
            ray_actor_options={"num_cpus": 0, "resources": {"worker": 0.6}})
        out["backend_goal"] = asyncio.run(client.wait_for_goal(asyncio.run(client.apply_backend(backend)), 90)).state.value
        endpoint = EndpointConfig(name="e", route="/e", traffic={"echo": 1.0})
        out["endpoint_goal"] = asyncio.run(client.wait_for_goal(asyncio.run(client.apply_endpoint(endpoint)), 60)).state.value
        [replica] = status().backends["echo"].replicas
        out["replica_on_worker_node"] = replica.node_id == worker.node_id and replica.node_id != head
        handle = ray.get_actor(REPLICA_PREFIX + replica.replica_id, namespace=NAMESPACE)
        url = f"http://{address}/e"
        with httpx.Client(timeout=10) as http:
            def over_tcp() -> bool:
                if http.get(url).status_code != 200:
                    return False
                return ray.get(handle.frames_served.remote(), timeout=30) > 0

            # The proxy asks for the replica's address in the background; until then, Ray carries requests.
            out["served_over_tcp"] = bool(wait(over_tcp, 60))
            before = ray.get(handle.frames_served.remote(), timeout=30)
            answers = [http.post(url, content=f"body {n}".encode()).status_code for n in range(20)]
        out["answers"] = answers
        # Opened when the head node's proxy asked for it, at the worker node's address.
        data = ray.get(handle.data_address.remote(), timeout=30)
        out["tcp_host_is_the_nodes"] = data.tcp is not None and data.tcp[0] == worker.node_ip_address
        out["served_since"] = ray.get(handle.frames_served.remote(), timeout=30) - before
        out["connections"] = ray.get(handle.data_connections.remote(), timeout=30)
    finally:
        print("RESULT " + json.dumps(out), flush=True)
        client.shutdown()
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    sys.exit(main())
