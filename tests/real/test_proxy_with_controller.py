"""The proxy as the controller runs it, configured only through the goal API.

The real controller starts the proxy and the replicas and pushes every
change by long poll; requests go over real HTTP on loopback. The few cases
that need a proxy with tiny bounds or a controller that has not yet noticed
a death are in test_proxy_http.py.
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

from controller.client import ControllerClient
from controller.state.backend_state import REPLICA_PREFIX
from controller.state.proxy_fleet import PROXY_PREFIX
from tests.support.stack import eventually, met, named_actors, quick_backend, run, start_controller
from vocabulary.control.longpoll import ReplicaState
from vocabulary.control.proxy_workers import DEFAULT_MAX_CONNECTIONS
from vocabulary.spec.endpoints import EndpointConfig

pytestmark = pytest.mark.real

# Chi-square critical value for one degree of freedom at p = 0.001.
CHI2_DF1_P001 = 10.83
TEN_MIB = 10 * 1024 * 1024
SIXTEEN_MIB = 16 * 1024 * 1024
# More than a proxy worker takes unless told (vocabulary.control.proxy_workers.DEFAULT_MAX_CONNECTIONS).
MANY_CONNECTIONS = DEFAULT_MAX_CONNECTIONS + 200


class Cluster:
    """A real controller in its own namespace, its proxy, and goal helpers."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.client: ControllerClient = start_controller(
            namespace, proxies=True, proxy_max_connections=MANY_CONNECTIONS + 100
        )
        self.url = "http://" + self._proxy_address()

    def _proxy_address(self) -> str:
        names = eventually(lambda: named_actors(self.namespace, PROXY_PREFIX), 60)
        assert names, "the controller started no proxy"
        return ray.get(ray.get_actor(min(names), namespace=self.namespace).ready.remote(), timeout=30)

    def backend(self, name: str, handler: str, *init_args: Any, replicas: int = 1, cap: int = 100) -> None:
        met(self.client, run(self.client.apply_backend(quick_backend(
            name, f"proxy_handlers:{handler}", init_args=init_args, num_replicas=replicas, max_concurrent_queries=cap,
        ))))

    def endpoint(self, name: str, traffic: dict[str, float], **fields: Any) -> None:
        met(self.client, run(self.client.apply_endpoint(
            EndpointConfig(name=name, route=f"/{name}", traffic=traffic, **fields)
        )))

    def replica_handles(self, backend: str) -> list[Any]:
        replicas = run(self.client.get_status()).backends[backend].replicas
        return [
            ray.get_actor(REPLICA_PREFIX + r.replica_id, namespace=self.namespace)
            for r in replicas if r.state is ReplicaState.RUNNING
        ]


@pytest.fixture(scope="module")
def cluster(ray_session: str) -> Iterator[Cluster]:
    built = Cluster(f"{ray_session}-proxy-{uuid.uuid4().hex[:6]}")
    yield built
    built.client.shutdown()


# --- routing and the request as user code sees it ------------------------------------


@pytest.mark.smoke
def test_the_request_reaches_user_code_intact_and_its_answer_comes_back(cluster: Cluster) -> None:
    cluster.backend("echo-v1", "Echo")
    cluster.endpoint("echo", {"echo-v1": 1.0})
    body = bytes(range(256)) * 100
    response = httpx.post(f"{cluster.url}/echo/deep/path?a=1&b=two", content=body,
                          headers={"x-custom": "yes"}, timeout=10)
    assert response.status_code == 200
    assert response.content == body
    assert (response.headers["x-method"], response.headers["x-path"]) == ("POST", "/echo/deep/path")
    assert (response.headers["x-query"], response.headers["x-custom"]) == ("a=1&b=two", "yes")


def test_unknown_paths_are_404_and_wrong_methods_405_with_allow(cluster: Cluster) -> None:
    cluster.backend("getonly-v1", "Named", "getonly")
    cluster.endpoint("getonly", {"getonly-v1": 1.0}, methods=("GET",))
    assert httpx.get(f"{cluster.url}/getonlyx", timeout=10).status_code == 404
    response = httpx.post(f"{cluster.url}/getonly", timeout=10)
    assert (response.status_code, response.headers["allow"]) == (405, "GET, HEAD")
    assert httpx.get(f"{cluster.url}/getonly/sub", timeout=10).json() == {"backend": "getonly"}


def test_routes_lists_the_table_and_healthz_answers(cluster: Cluster) -> None:
    cluster.backend("listed-v1", "Named", "listed")
    cluster.endpoint("listed", {"listed-v1": 1.0})
    assert httpx.get(f"{cluster.url}/-/healthz", timeout=10).status_code == 200
    assert httpx.get(f"{cluster.url}/-/routes", timeout=10).json()["/listed"] == {
        "endpoint": "listed", "methods": ["GET", "POST"],
    }


def test_a_body_over_ten_mib_is_413_and_one_at_the_limit_is_served(cluster: Cluster) -> None:
    cluster.backend("big-v1", "Echo")
    cluster.endpoint("big", {"big-v1": 1.0})
    assert httpx.post(f"{cluster.url}/big", content=b"x" * (TEN_MIB + 1), timeout=30).status_code == 413
    response = httpx.post(f"{cluster.url}/big", content=b"y" * TEN_MIB, timeout=30)
    assert response.status_code == 200 and len(response.content) == TEN_MIB


def test_a_16_mib_body_is_served_where_the_endpoint_allows_it_and_413_where_it_does_not(cluster: Cluster) -> None:
    cluster.backend("large-v1", "Echo")
    cluster.endpoint("large", {"large-v1": 1.0}, max_body_bytes=SIXTEEN_MIB)
    cluster.endpoint("small", {"large-v1": 1.0})  # the default limit, 10 MiB
    body = bytes(range(256)) * (SIXTEEN_MIB // 256)
    [replica] = cluster.replica_handles("large-v1")
    # Over the data connection (once it is made), both ways in raw pieces: byte-exact at every size
    # about the thresholds (one frame; one piece; pieces and a short last one; 16 MiB).
    assert eventually(lambda: httpx.post(f"{cluster.url}/large", content=b"x", timeout=30).status_code == 200
                      and ray.get(replica.frames_served.remote(), timeout=30) > 0, 60)
    before = ray.get(replica.frames_served.remote(), timeout=30)
    for size in (128 * 1024, 128 * 1024 + 1, 3 * 1024 * 1024 + 7, SIXTEEN_MIB):
        response = httpx.post(f"{cluster.url}/large", content=body[:size], timeout=60)
        assert response.status_code == 200 and response.content == body[:size], size
        assert response.headers["content-length"] == str(size)
    assert ray.get(replica.frames_served.remote(), timeout=30) - before == 4
    # A HEAD whose handler answers 3 MiB: the head says so, and no byte of the body follows.
    head = httpx.request("HEAD", f"{cluster.url}/large", content=body[: 3 * 1024 * 1024 + 7], timeout=60)
    assert (head.status_code, head.headers["content-length"], head.content) == (200, str(3 * 1024 * 1024 + 7), b"")
    assert httpx.post(f"{cluster.url}/large", content=body + b"!", timeout=60).status_code == 413
    assert httpx.post(f"{cluster.url}/small", content=body, timeout=60).status_code == 413


def test_more_connections_than_the_default_are_served_at_once_when_configured(cluster: Cluster) -> None:
    host, port = cluster.url.removeprefix("http://").rsplit(":", 1)

    async def hold_many() -> Counter[bytes]:
        connections = [await asyncio.open_connection(host, int(port)) for _ in range(MANY_CONNECTIONS)]
        try:
            for _, writer in connections:
                writer.write(b"GET /-/healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            lines = await asyncio.gather(*(reader.readline() for reader, _ in connections))
            return Counter(line.split(b" ")[1] for line in lines)
        finally:
            for _, writer in connections:
                writer.close()

    assert asyncio.run(hold_many()) == Counter({b"200": MANY_CONNECTIONS})


# --- failures -----------------------------------------------------------------------------


def test_a_raising_handler_is_500_without_the_traceback(cluster: Cluster) -> None:
    cluster.backend("raises-v1", "Raises")
    cluster.endpoint("raises", {"raises-v1": 1.0})
    response = httpx.get(f"{cluster.url}/raises", timeout=10)
    assert response.status_code == 500
    assert "secret" not in response.text and "Traceback" not in response.text


def test_a_timed_out_request_is_504_and_stops_running_on_the_replica(cluster: Cluster) -> None:
    cluster.backend("slow-v1", "Sleeps")
    cluster.endpoint("slow", {"slow-v1": 1.0}, timeout_s=0.5)
    started = time.monotonic()
    response = httpx.get(f"{cluster.url}/slow?s=20", timeout=10)
    assert response.status_code == 504 and time.monotonic() - started < 5
    [replica] = cluster.replica_handles("slow-v1")
    assert eventually(lambda: ray.get(replica.num_ongoing.remote(), timeout=10) == 0, 10)


def test_timed_out_requests_coalesced_into_one_call_are_all_504_and_stop_on_the_replica(cluster: Cluster) -> None:
    cluster.backend("slowbatch-v1", "Sleeps")
    cluster.endpoint("slowbatch", {"slowbatch-v1": 1.0}, timeout_s=0.5)

    async def burst() -> tuple[list[int], int]:
        async with httpx.AsyncClient(base_url=cluster.url, timeout=10) as client:
            slow = asyncio.gather(*(client.get("/slowbatch?s=20") for _ in range(8)))
            # A quick answer while the eight run: the replica is slow for them, not hung, so the
            # stall rule (proxy.pool.stalls) keeps it; without it, eight calls timing out with
            # nothing answered is a stall and the replica is rightly replaced.
            await asyncio.sleep(0.1)
            quick = await client.get("/slowbatch?s=0")
            return [r.status_code for r in await slow], quick.status_code

    assert run(burst()) == ([504] * 8, 200)
    [replica] = cluster.replica_handles("slowbatch-v1")
    assert eventually(lambda: ray.get(replica.num_ongoing.remote(), timeout=10) == 0, 10)


def test_a_get_whose_replica_died_is_retried_on_another(cluster: Cluster, tmp_path: Path) -> None:
    cluster.backend("mortal-v1", "Mortal", replicas=2)
    cluster.endpoint("mortal", {"mortal-v1": 1.0})
    marker = tmp_path / "died"
    response = httpx.get(f"{cluster.url}/mortal", params={"die_once": str(marker)}, timeout=20)
    assert (response.status_code, response.text) == (200, "survivor")
    assert marker.exists()


def test_a_post_whose_replica_died_is_not_retried(cluster: Cluster, tmp_path: Path) -> None:
    cluster.backend("fragile-v1", "Mortal", replicas=2)
    cluster.endpoint("fragile", {"fragile-v1": 1.0})
    marker = tmp_path / "died"
    response = httpx.post(f"{cluster.url}/fragile", params={"die_once": str(marker)}, timeout=20)
    assert response.status_code == 502


# --- traffic -------------------------------------------------------------------------------


def test_a_ninety_ten_split_is_served_within_statistical_tolerance(cluster: Cluster) -> None:
    cluster.backend("split-a", "Named", "a")
    cluster.backend("split-b", "Named", "b")
    cluster.endpoint("split", {"split-a": 0.9, "split-b": 0.1})
    with httpx.Client(base_url=cluster.url, timeout=10) as client:
        counts = Counter(client.get("/split").json()["backend"] for _ in range(1_000))
    chi2 = (counts["a"] - 900) ** 2 / 900 + (counts["b"] - 100) ** 2 / 100
    assert chi2 < CHI2_DF1_P001, counts


def test_traffic_switches_under_load_fail_no_request(cluster: Cluster) -> None:
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


@pytest.mark.parametrize("shadow_handler", ["Sleeps", "Raises"])
def test_a_sleeping_or_raising_shadow_changes_neither_answers_nor_latency(cluster: Cluster, shadow_handler: str) -> None:
    name = f"shadowed-{shadow_handler.lower()}"
    cluster.backend(f"{name}-v1", "Named", "primary")
    cluster.backend(f"{name}-copy", shadow_handler, cap=2)
    cluster.endpoint(name, {f"{name}-v1": 1.0}, shadow={f"{name}-copy": 1.0})
    latencies, answers = [], []
    with httpx.Client(base_url=cluster.url, timeout=10) as client:
        for _ in range(20):
            started = time.monotonic()
            response = client.get(f"/{name}?s=3")
            latencies.append(time.monotonic() - started)
            answers.append((response.status_code, response.json()))
    assert answers == [(200, {"backend": "primary"})] * 20
    # A shadow copy sleeps 3 s; the primary never waits for it.
    assert max(latencies) < 1.5


def test_the_proxy_reports_backend_load_to_the_controller(cluster: Cluster) -> None:
    cluster.backend("reported-v1", "Named", "reported")
    cluster.endpoint("reported", {"reported-v1": 1.0})

    def reported() -> bool:
        loads = ray.get(cluster.client.handle.get_load.remote(), timeout=10)
        return any("reported-v1" in per_proxy for per_proxy in loads.values())

    assert eventually(reported, 10)
