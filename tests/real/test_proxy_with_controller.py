"""The proxy as the controller runs it: configured only through the goal API.

Complements test_proxy_http.py (which feeds the proxy exact long-poll
payloads to reach every status code): here the real controller starts the
proxy and the replicas, and pushes every change.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import ray

from controller.client import ControllerClient, start_or_connect
from controller.configs import BackendConfig, EndpointConfig, GoalState
from controller.ray_adapter import PROXY_PREFIX

pytestmark = pytest.mark.real

APPS = str(Path(__file__).parent / "apps")
FAST = {
    "tick_s": 0.05,
    "proxy_check_s": 0.3,
    "longpoll_timeout_s": 5.0,
    "startup_timeout_s": 30.0,
    "backoff_base_s": 0.2,
    "backoff_max_s": 1.0,
    "proxy_class": "proxy.actor:ProxyActor",
}
# Chi-square critical value for one degree of freedom at p = 0.001.
CHI2_DF1_P001 = 10.83


def run(coro: Any) -> Any:
    return asyncio.run(coro)


class Cluster:
    def __init__(self, namespace: str) -> None:
        self.client: ControllerClient = start_or_connect(
            namespace=namespace, proxy_host="127.0.0.1", proxy_port=0, options=FAST
        )
        self.url = "http://" + self._proxy_address(namespace)

    def _proxy_address(self, namespace: str, timeout_s: float = 60.0) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            names = [
                a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                if a["namespace"] == namespace and a["name"].startswith(PROXY_PREFIX)
            ]
            if names:
                return ray.get(ray.get_actor(names[0], namespace=namespace).ready.remote(), timeout=30)
            time.sleep(0.1)
        raise AssertionError("the controller started no proxy")

    def met(self, goal_id: str) -> None:
        result = run(self.client.wait_for_goal(goal_id, 60))
        assert result.state == GoalState.MET, result

    def backend(self, name: str, handler: str, *init_args: Any, max_concurrent_queries: int = 100) -> None:
        self.met(run(self.client.apply_backend(BackendConfig(
            name=name, version="v1", import_path=f"proxy_handlers:{handler}", init_args=init_args,
            num_replicas=1, max_concurrent_queries=max_concurrent_queries, working_dir=APPS,
            ray_actor_options={"num_cpus": 0}, graceful_shutdown_timeout_s=1.0,
        ))))

    def endpoint(self, name: str, traffic: dict[str, float], **fields: Any) -> None:
        self.met(run(self.client.apply_endpoint(EndpointConfig(name=name, route=f"/{name}", traffic=traffic, **fields))))


@pytest.fixture(scope="module")
def cluster(ray_session: str) -> Iterator[Cluster]:
    built = Cluster(f"{ray_session}-proxy-{uuid.uuid4().hex[:6]}")
    yield built
    built.client.shutdown()


def test_an_endpoint_applied_through_the_controller_is_served(cluster: Cluster) -> None:
    cluster.backend("served-v1", "Named", "served")
    cluster.endpoint("served", {"served-v1": 1.0}, methods=("GET",))
    assert httpx.get(f"{cluster.url}/served", timeout=10).json() == {"backend": "served"}
    assert httpx.post(f"{cluster.url}/served", timeout=10).status_code == 405
    assert httpx.get(f"{cluster.url}/-/routes", timeout=10).json()["/served"]["endpoint"] == "served"


def test_a_ninety_ten_split_is_served_within_statistical_tolerance(cluster: Cluster) -> None:
    cluster.backend("split-a", "Named", "a")
    cluster.backend("split-b", "Named", "b")
    cluster.endpoint("split", {"split-a": 0.9, "split-b": 0.1})
    with httpx.Client(base_url=cluster.url, timeout=10) as client:
        counts = Counter(client.get("/split").json()["backend"] for _ in range(1_000))
    chi2 = (counts["a"] - 900) ** 2 / 900 + (counts["b"] - 100) ** 2 / 100
    assert chi2 < CHI2_DF1_P001, counts


def test_traffic_switches_through_the_controller_under_load_fail_no_request(cluster: Cluster) -> None:
    cluster.backend("switch-one", "Named", "one")
    cluster.backend("switch-two", "Named", "two")
    cluster.endpoint("switch", {"switch-one": 1.0})
    plans = [{"switch-two": 1.0}, {"switch-one": 0.5, "switch-two": 0.5}, {"switch-one": 1.0}, {"switch-two": 1.0}]

    async def load(stop: asyncio.Event, seen: list[tuple[int, str]]) -> None:
        async with httpx.AsyncClient(base_url=cluster.url, timeout=20) as client:
            while not stop.is_set():
                response = await client.get("/switch")
                seen.append((response.status_code, response.text))

    async def scenario() -> list[tuple[int, str]]:
        stop, seen = asyncio.Event(), []
        clients = [asyncio.ensure_future(load(stop, seen)) for _ in range(8)]
        for traffic in plans:
            await asyncio.to_thread(cluster.endpoint, "switch", traffic)
            # Keep the load on the new table for a moment before switching again.
            await asyncio.sleep(0.3)
        stop.set()
        await asyncio.gather(*clients)
        return seen

    seen = run(scenario())
    assert len(seen) > 50
    assert {code for code, _ in seen} == {200}
    assert {text for _, text in seen} == {'{"backend":"one"}', '{"backend":"two"}'}


def test_a_sleeping_shadow_changes_neither_answers_nor_latency(cluster: Cluster) -> None:
    cluster.backend("shadowed-v1", "Named", "primary")
    cluster.backend("shadowed-copy", "Sleeps", max_concurrent_queries=2)
    cluster.endpoint("shadowed", {"shadowed-v1": 1.0}, shadow={"shadowed-copy": 1.0})
    latencies, answers = [], []
    with httpx.Client(base_url=cluster.url, timeout=10) as client:
        for _ in range(20):
            started = time.monotonic()
            response = client.get("/shadowed?s=3")
            latencies.append(time.monotonic() - started)
            answers.append((response.status_code, response.json()))
    assert answers == [(200, {"backend": "primary"})] * 20
    assert max(latencies) < 1.5
