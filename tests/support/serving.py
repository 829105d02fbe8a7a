"""A controller, its proxy and backends on the session's Ray, for the scenarios.

Owns setting up what a user serves (a controller with its proxy on a fixed
loopback port, backends from tests/real/apps, one endpoint) and the reads a
scenario makes of it: replicas by state, actor handles, leaked actors. The
fixed port matters: a proxy restarted by Ray or replaced by the controller
must come back where the clients keep connecting.
"""

from __future__ import annotations

from typing import Any

import httpx
import ray

from controller.state.backend_state import REPLICA_PREFIX
from controller.state.proxy_fleet import PROXY_PREFIX
from tests.support.faults import leaked_replicas, leftover_actors
from tests.support.stack import eventually, free_port, met, quick_backend, run, start_controller
from vocabulary.control.goal_api import CONTROLLER_NAME
from vocabulary.control.status import ClusterStatus, ReplicaStatus
from vocabulary.spec.endpoints import EndpointConfig

__all__ = ["Serving"]


class Serving:
    def __init__(self, namespace: str, **controller_options: Any) -> None:
        self.namespace = namespace
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.client = start_controller(namespace, proxies=True, proxy_port=self.port, **controller_options)
        eventually(self.healthy, 60, what="the proxy answers /-/healthz", retry_on=(httpx.TransportError,))

    def healthy(self) -> bool:
        return httpx.get(self.url + "/-/healthz", timeout=2).status_code == 200

    # --- what a user deploys ---------------------------------------------------

    def backend_config(self, name: str, replicas: int, version: str = "v1", **fields: Any) -> Any:
        fields = {"import_path": "controller_apps:Echo", "init_args": (version,), **fields}
        return quick_backend(name, fields.pop("import_path"), version=version, num_replicas=replicas, **fields)

    def apply(self, name: str, replicas: int, version: str = "v1", **fields: Any) -> str:
        """Start applying a backend; returns the goal id without waiting."""
        return run(self.client.apply_backend(self.backend_config(name, replicas, version, **fields)))

    def deploy(self, name: str, replicas: int, version: str = "v1", **fields: Any) -> None:
        met(self.client, self.apply(name, replicas, version, **fields), 90)

    def route(self, backend: str) -> None:
        """An endpoint of the backend's name at `/<backend>`, all traffic to it."""
        config = EndpointConfig(name=backend, route=f"/{backend}", traffic={backend: 1.0})
        met(self.client, run(self.client.apply_endpoint(config)), 60)

    def load_url(self, backend: str, sleep_s: float = 0.01) -> str:
        """The backend's endpoint; each request spends `sleep_s` on the replica,
        so that kills meet requests in flight."""
        return f"{self.url}/{backend}?sleep={sleep_s}"

    def retire(self, backend: str) -> None:
        """Remove the backend and its endpoint, so the next scenario starts from a quiet cluster."""
        met(self.client, run(self.client.delete_endpoint(backend)), 60)
        met(self.client, run(self.client.delete_backend(backend)), 60)

    # --- what a scenario reads ---------------------------------------------------

    def status(self) -> ClusterStatus:
        return run(self.client.get_status())

    def replicas(self, backend: str, *states: str) -> list[ReplicaStatus]:
        status = self.status().backends.get(backend)
        replicas = status.replicas if status is not None else ()
        return [r for r in replicas if not states or r.state in states]

    def replica_handle(self, replica_id: str) -> Any:
        return ray.get_actor(REPLICA_PREFIX + replica_id, namespace=self.namespace)

    def controller_handle(self) -> Any:
        return ray.get_actor(CONTROLLER_NAME, namespace=self.namespace)

    def proxy_handle(self) -> Any:
        names = [n for n in leftover_actors(self.namespace) if n.startswith(PROXY_PREFIX)]
        assert len(names) == 1, f"expected one proxy on one node, found {names}"
        return ray.get_actor(names[0], namespace=self.namespace)

    def leaked(self) -> int:
        return leaked_replicas(self.namespace, self.status())

    def shutdown(self) -> list[str]:
        """Stop everything; returns the named actors still alive 30 s later (none expected)."""
        self.client.shutdown()
        try:
            eventually(lambda: not leftover_actors(self.namespace), 30, interval_s=0.2)
        except AssertionError:
            pass
        return leftover_actors(self.namespace)
