"""The shipped examples (deployments/) served by a real controller and proxy.

A test takes a shipped backend or endpoint, renames it (so each test has its
own), adjusts fields and applies it; the code runs from a copy of
deployments/ in a tmp working_dir, as the agent would ship it from a commit.
"""

from __future__ import annotations

import asyncio
import shutil
import uuid
from pathlib import Path
from typing import Any, Iterator

import httpx

from controller.client import ControllerClient
from gitops.specs.loading import Loader
from tests.support.stack import met, proxy_url, run, start_controller
from vocabulary.control.longpoll import ReplicaState
from vocabulary.spec.backends import BackendConfig
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.state import ServingState

REPO_ROOT = Path(__file__).resolve().parents[2]
# Test speed on a shared machine: no CPU reserved, quick health checks and stops (a check may take
# 20 s, as in `tests.support.stack.quick_backend`, which says why).
TEST_SPEED: dict[str, Any] = {
    "ray_actor_options": {"num_cpus": 0},
    "health_check_period_s": 0.5,
    "health_check_timeout_s": 20.0,
    "graceful_shutdown_timeout_s": 1.0,
}


class ShippedExamples:
    def __init__(self, client: ControllerClient, namespace: str, state: ServingState, code: str) -> None:
        self.client, self.namespace, self.state, self.code = client, namespace, state, code
        self.url = proxy_url(namespace)

    def backend(self, shipped: str, name: str, **fields: Any) -> BackendConfig:
        """Apply the shipped backend `shipped` as `name`, with `fields` changed; wait for its goal."""
        config = self.state.backends[shipped].model_copy(
            update={"name": name, "working_dir": self.code, **TEST_SPEED, **fields}
        )
        met(self.client, run(self.client.apply_backend(config)))
        return config

    def endpoint(self, shipped: str, name: str, backend: str) -> EndpointConfig:
        """Apply the shipped endpoint `shipped` as `name` on `/name`, all traffic to `backend`."""
        config = self.state.endpoints[shipped].model_copy(
            update={"name": name, "route": f"/{name}", "traffic": {backend: 1.0}}
        )
        met(self.client, run(self.client.apply_endpoint(config)))
        return config

    def shipped_endpoint(self, name: str) -> EndpointConfig:
        """Apply the shipped endpoint `name` as it is."""
        config = self.state.endpoints[name]
        met(self.client, run(self.client.apply_endpoint(config)))
        return config

    def running_ids(self, backend: str) -> set[str]:
        replicas = run(self.client.get_status()).backends[backend].replicas
        return {r.replica_id for r in replicas if r.state is ReplicaState.RUNNING}

    def burst(self, route: str, bodies: list[str]) -> list[httpx.Response]:
        """POST every body at once; the responses in order."""

        async def send() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=self.url, timeout=30) as client:
                return list(await asyncio.gather(*(client.post(route, content=body) for body in bodies)))

        return run(send())


def serve_shipped_examples(ray_session: str, tmp: Path, **options: Any) -> Iterator[ShippedExamples]:
    """Body of a module fixture: a controller with a proxy and the shipped specs;
    `options` go to the controller (e.g. `proxy_metrics_port`)."""
    loaded = Loader().load_directory(REPO_ROOT / "deployments", root=REPO_ROOT)
    assert loaded.state is not None, [str(error) for error in loaded.errors]
    shutil.copytree(REPO_ROOT / "deployments", tmp / "deployments", ignore=shutil.ignore_patterns("__pycache__"))
    namespace = f"{ray_session}-examples-{uuid.uuid4().hex[:6]}"
    client = start_controller(namespace, proxies=True, **options)
    try:
        yield ShippedExamples(client, namespace, loaded.state, str(tmp))
    finally:
        client.shutdown()
