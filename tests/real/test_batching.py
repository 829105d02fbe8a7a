"""Batching end to end: the shipped batched model (deployments/batched.toml)
behind the real controller and proxy, over HTTP on loopback."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import ray

from controller.client import ControllerClient
from controller.proxy_fleet import PROXY_PREFIX
from gitops.specs.loading import Loader
from tests.real.support import eventually, met, named_actors, run, start_controller
from vocabulary.configs import BackendConfig, BatchingConfig, EndpointConfig, ServingState

pytestmark = pytest.mark.real

REPO_ROOT = Path(__file__).resolve().parents[2]
TEST_SPEED = {
    "ray_actor_options": {"num_cpus": 0},
    "health_check_period_s": 0.5,
    "health_check_timeout_s": 5.0,
    "graceful_shutdown_timeout_s": 1.0,
}


class Served:
    """The shipped example's configs with their code in a tmp working_dir."""

    def __init__(self, client: ControllerClient, namespace: str, state: ServingState, code: str) -> None:
        self.client, self.namespace, self.state, self.code = client, namespace, state, code
        names = eventually(lambda: named_actors(namespace, PROXY_PREFIX), 60)
        proxy = ray.get_actor(min(names), namespace=namespace)
        self.url = "http://" + ray.get(proxy.ready.remote(), timeout=30)

    def backend(self, name: str, **fields: Any) -> BackendConfig:
        shipped = self.state.backends["vowels"]
        config = shipped.model_copy(update={"name": name, "working_dir": self.code, **TEST_SPEED, **fields})
        met(self.client, run(self.client.apply_backend(config)))
        return config

    def endpoint(self, name: str, backend: str) -> None:
        shipped = self.state.endpoints["vowels"]
        config: EndpointConfig = shipped.model_copy(
            update={"name": name, "route": f"/{name}", "traffic": {backend: 1.0}}
        )
        met(self.client, run(self.client.apply_endpoint(config)))

    def running_ids(self, backend: str) -> set[str]:
        replicas = run(self.client.get_status())["backends"][backend]["replicas"]
        return {r["replica_id"] for r in replicas if r["state"] == "RUNNING"}

    def burst(self, route: str, texts: list[str]) -> list[dict[str, int]]:
        async def send() -> list[dict[str, int]]:
            async with httpx.AsyncClient(base_url=self.url, timeout=10) as client:
                responses = await asyncio.gather(*(client.post(route, content=text) for text in texts))
            assert [r.status_code for r in responses] == [200] * len(texts)
            return [r.json() for r in responses]

        return run(send())


@pytest.fixture(scope="module")
def served(ray_session: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    loaded = Loader().load_directory(REPO_ROOT / "deployments", root=REPO_ROOT)
    assert loaded.state is not None, [str(error) for error in loaded.errors]
    code = tmp_path_factory.mktemp("code")
    shutil.copytree(REPO_ROOT / "deployments", code / "deployments", ignore=shutil.ignore_patterns("__pycache__"))
    namespace = f"{ray_session}-batching-{uuid.uuid4().hex[:6]}"
    client = start_controller(namespace, proxies=True)
    try:
        yield Served(client, namespace, loaded.state, str(code))
    finally:
        client.shutdown()


def test_an_idle_batched_backend_hands_each_request_over_as_a_batch_of_one(served: Served) -> None:
    served.backend("vowels-idle")
    served.endpoint("idle", "vowels-idle")
    with httpx.Client(base_url=served.url, timeout=10) as client:
        answers = [client.post("/idle", content=text).json() for text in ("banana", "sky", "queue")]
    assert answers == [
        {"vowels": 3, "batch_size": 1}, {"vowels": 0, "batch_size": 1}, {"vowels": 4, "batch_size": 1},
    ]


def test_concurrent_requests_reach_the_handler_in_batches_of_more_than_one(served: Served) -> None:
    served.backend("vowels-busy")
    served.endpoint("busy", "vowels-busy")
    texts = ["a" * n for n in range(32)]
    answers = served.burst("/busy", texts)
    assert [answer["vowels"] for answer in answers] == list(range(32))
    sizes = [answer["batch_size"] for answer in answers]
    assert max(sizes) > 1 and max(sizes) <= 8


def test_a_new_max_batch_size_applies_in_place_without_a_restart(served: Served) -> None:
    served.backend("vowels-tuned")
    served.endpoint("tuned", "vowels-tuned")
    before = served.running_ids("vowels-tuned")
    served.backend("vowels-tuned", batching=BatchingConfig(max_batch_size=2, batch_wait_timeout_s=0.05))

    def largest_batch() -> int:
        return max(answer["batch_size"] for answer in served.burst("/tuned", ["aeiou"] * 16))

    eventually(lambda: largest_batch() == 2, 30, what="batches of at most 2 after the change")
    assert served.running_ids("vowels-tuned") == before
