"""The proxy actor over real HTTP, with real replica actors on a local Ray.

The controller's long poll is played by a small fake so each test can
publish exactly the routes, endpoints and replica sets it needs.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, Iterator

import httpx
import pytest
import ray

from controller.configs import EndpointConfig, ReplicaInfo, ReplicaSet, RouteEntry, RouteTable
from controller.replica import Replica
from proxy.actor import ProxyActor
from proxy.settings import ProxySettings
from tests.real.apps.proxy_fakes import FakeController

pytestmark = pytest.mark.real

APPS = "tests.real.apps.proxy_handlers"
SETTINGS = ProxySettings(max_body_bytes=64 * 1024, max_queued_per_backend=2, max_shadow_in_flight=2)


class Stack:
    """A fake controller, one proxy actor and the replicas tests start."""

    def __init__(self, namespace: str) -> None:
        self.name = f"fake-controller-{uuid.uuid4().hex[:6]}"
        self.controller = ray.remote(FakeController).options(name=self.name, num_cpus=0).remote(2.0)
        self.proxy = ray.remote(ProxyActor).options(num_cpus=0).remote(
            self.name, namespace, "node-test", "127.0.0.1", 0, SETTINGS
        )
        self.url = "http://" + ray.get(self.proxy.ready.remote(), timeout=60)
        self.replicas: list[Any] = []
        self.routes: dict[str, RouteEntry] = {}

    def start_replicas(self, backend: str, handler: str, *init_args: Any, count: int = 1) -> list[ReplicaInfo]:
        infos = []
        for _ in range(count):
            replica_id = f"{backend}-{uuid.uuid4().hex[:6]}"
            handle = ray.remote(Replica).options(num_cpus=0, max_restarts=0).remote(
                backend, replica_id, "v", f"{APPS}:{handler}", init_args
            )
            self.replicas.append(handle)
            infos.append(ReplicaInfo(replica_id=replica_id, actor_name=replica_id, handle=handle))
        ray.get([info.handle.initialize.remote() for info in infos], timeout=60)
        return infos

    def publish(self, updates: dict[str, Any]) -> None:
        ray.get(self.controller.publish.remote(updates), timeout=10)

    def serve(self, endpoint: EndpointConfig, replicas: dict[str, list[ReplicaInfo]], cap: int = 100) -> None:
        self.routes[endpoint.route] = RouteEntry(route=endpoint.route, methods=endpoint.methods, endpoint=endpoint.name)
        self.publish({
            "routes": RouteTable(entries=tuple(self.routes.values())),
            f"endpoint:{endpoint.name}": endpoint,
            **{f"replicas:{b}": ReplicaSet(backend=b, max_concurrent_queries=cap, replicas=tuple(r))
               for b, r in replicas.items()},
        })
        self.wait_until_routed(endpoint.route)

    def wait_until_routed(self, route: str, timeout_s: float = 15.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if route in httpx.get(f"{self.url}/-/routes", timeout=5).json():
                return
            time.sleep(0.05)
        raise AssertionError(f"proxy never served {route}")

    def close(self) -> None:
        ray.get(self.proxy.shutdown.remote(), timeout=30)
        for handle in [self.proxy, self.controller, *self.replicas]:
            ray.kill(handle)


@pytest.fixture(scope="module")
def stack(ray_session: str) -> Iterator[Stack]:
    built = Stack(ray_session)
    yield built
    built.close()


def endpoint(name: str, traffic: dict[str, float], **fields: Any) -> EndpointConfig:
    return EndpointConfig(name=name, route=f"/{name}", traffic=traffic, **fields)


# --- routing and the request as user code sees it ------------------------------------


def test_the_request_reaches_user_code_intact_and_its_answer_comes_back(stack: Stack) -> None:
    stack.serve(endpoint("echo", {"echo-v1": 1.0}), {"echo-v1": stack.start_replicas("echo-v1", "Echo")})
    body = bytes(range(256)) * 100
    response = httpx.post(f"{stack.url}/echo/deep/path?a=1&b=two", content=body, headers={"x-custom": "yes"}, timeout=10)
    assert response.status_code == 200
    assert response.content == body
    assert (response.headers["x-method"], response.headers["x-path"]) == ("POST", "/echo/deep/path")
    assert (response.headers["x-query"], response.headers["x-custom"]) == ("a=1&b=two", "yes")


def test_unknown_paths_are_404_and_wrong_methods_405_with_allow(stack: Stack) -> None:
    stack.serve(endpoint("getonly", {"getonly-v1": 1.0}, methods=("GET",)),
                {"getonly-v1": stack.start_replicas("getonly-v1", "Named", "getonly")})
    assert httpx.get(f"{stack.url}/getonlyx", timeout=10).status_code == 404
    response = httpx.post(f"{stack.url}/getonly", timeout=10)
    assert (response.status_code, response.headers["allow"]) == (405, "GET, HEAD")
    assert httpx.get(f"{stack.url}/getonly", timeout=10).json() == {"backend": "getonly"}


def test_a_body_over_the_limit_is_413(stack: Stack) -> None:
    stack.serve(endpoint("big", {"big-v1": 1.0}), {"big-v1": stack.start_replicas("big-v1", "Echo")})
    response = httpx.post(f"{stack.url}/big", content=b"x" * (64 * 1024 + 1), timeout=10)
    assert response.status_code == 413


def test_routes_and_healthz(stack: Stack) -> None:
    assert httpx.get(f"{stack.url}/-/healthz", timeout=10).status_code == 200
    stack.serve(endpoint("listed", {"listed-v1": 1.0}), {"listed-v1": []})
    assert httpx.get(f"{stack.url}/-/routes", timeout=10).json()["/listed"] == {
        "endpoint": "listed", "methods": ["GET", "POST"],
    }


# --- failures -------------------------------------------------------------------------


def test_no_ready_replica_is_503_with_retry_after(stack: Stack) -> None:
    stack.serve(endpoint("empty", {"empty-v1": 1.0}), {"empty-v1": []})
    response = httpx.get(f"{stack.url}/empty", timeout=10)
    assert response.status_code == 503 and response.headers["retry-after"] == "1"


def test_a_raising_handler_is_500_without_the_traceback(stack: Stack) -> None:
    stack.serve(endpoint("raises", {"raises-v1": 1.0}), {"raises-v1": stack.start_replicas("raises-v1", "Raises")})
    response = httpx.get(f"{stack.url}/raises", timeout=10)
    assert response.status_code == 500
    assert "secret" not in response.text and "Traceback" not in response.text


def test_a_timed_out_request_is_504_and_stops_running_on_the_replica(stack: Stack) -> None:
    [replica] = stack.start_replicas("slow-v1", "Sleeps")
    stack.serve(endpoint("slow", {"slow-v1": 1.0}, timeout_s=0.5), {"slow-v1": [replica]})
    started = time.monotonic()
    response = httpx.get(f"{stack.url}/slow?s=20", timeout=10)
    assert response.status_code == 504 and time.monotonic() - started < 5
    deadline = time.monotonic() + 10
    while ray.get(replica.handle.num_ongoing.remote(), timeout=10) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ray.get(replica.handle.num_ongoing.remote(), timeout=10) == 0


def test_a_full_queue_is_503_with_retry_after(stack: Stack) -> None:
    stack.serve(endpoint("busy", {"busy-v1": 1.0}), {"busy-v1": stack.start_replicas("busy-v1", "Sleeps")}, cap=1)

    async def scenario() -> list[int]:
        async with httpx.AsyncClient(base_url=stack.url, timeout=20) as client:
            # One running and two queued fill the backend (cap 1, queue 2).
            filling = [asyncio.ensure_future(client.get("/busy?s=1.5")) for _ in range(3)]
            await asyncio.sleep(0.5)
            rejected = await client.get("/busy?s=0")
            return [rejected.status_code] + [(await f).status_code for f in filling]

    assert asyncio.run(scenario()) == [503, 200, 200, 200]


def test_a_get_whose_replica_died_is_retried_on_another(stack: Stack) -> None:
    mortal = stack.start_replicas("mortal-v1", "Mortal", True)
    survivor = stack.start_replicas("mortal-v1", "Mortal", False)
    stack.serve(endpoint("mortal", {"mortal-v1": 1.0}), {"mortal-v1": mortal + survivor})
    codes = [httpx.get(f"{stack.url}/mortal?die=1", timeout=20).status_code for _ in range(12)]
    assert codes == [200] * 12
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(mortal[0].handle.ready.remote(), timeout=10)


def test_a_post_whose_replica_died_is_502_and_the_replica_is_dropped(stack: Stack) -> None:
    stack.serve(endpoint("fragile", {"fragile-v1": 1.0}), {"fragile-v1": stack.start_replicas("fragile-v1", "Mortal", True)})
    assert httpx.post(f"{stack.url}/fragile?die=1", timeout=20).status_code == 502
    # The controller still lists the dead replica; the proxy no longer uses it.
    assert httpx.get(f"{stack.url}/fragile", timeout=20).status_code == 503


# --- shadow ------------------------------------------------------------------------------


@pytest.mark.parametrize("shadow_handler", ["Sleeps", "Raises"])
def test_a_sleeping_or_raising_shadow_changes_neither_answers_nor_latency(stack: Stack, shadow_handler: str) -> None:
    name = f"primary-{shadow_handler.lower()}"
    primary = stack.start_replicas(f"{name}-v1", "Named", "primary")
    shadow = stack.start_replicas(f"{name}-shadow", shadow_handler)
    stack.serve(
        endpoint(name, {f"{name}-v1": 1.0}, shadow={f"{name}-shadow": 1.0}),
        {f"{name}-v1": primary, f"{name}-shadow": shadow},
        cap=2,
    )
    latencies, answers = [], []
    with httpx.Client(base_url=stack.url, timeout=10) as client:
        for _ in range(20):
            started = time.monotonic()
            response = client.get(f"/{name}?s=3")
            latencies.append(time.monotonic() - started)
            answers.append((response.status_code, response.json()))
    assert answers == [(200, {"backend": "primary"})] * 20
    # The shadow sleeps 3 s per copy; the primary never waits for it.
    assert max(latencies) < 1.5


# --- config switches -------------------------------------------------------------------------


def test_traffic_switches_under_concurrent_load_fail_no_request(stack: Stack) -> None:
    v1 = stack.start_replicas("switch-v1", "Named", "v1")
    v2 = stack.start_replicas("switch-v2", "Named", "v2")
    stack.serve(endpoint("switch", {"switch-v1": 1.0}), {"switch-v1": v1, "switch-v2": v2})
    stack.publish({"replicas:switch-v2": ReplicaSet(backend="switch-v2", max_concurrent_queries=100, replicas=tuple(v2))})
    plans = [{"switch-v2": 1.0}, {"switch-v1": 0.5, "switch-v2": 0.5}, {"switch-v1": 1.0}] * 3

    async def load(stop: asyncio.Event, seen: list[tuple[int, str]]) -> None:
        async with httpx.AsyncClient(base_url=stack.url, timeout=20) as client:
            while not stop.is_set():
                response = await client.get("/switch")
                seen.append((response.status_code, response.text))

    async def scenario() -> list[tuple[int, str]]:
        stop, seen = asyncio.Event(), []
        clients = [asyncio.ensure_future(load(stop, seen)) for _ in range(8)]
        for traffic in plans:
            await asyncio.to_thread(stack.publish, {"endpoint:switch": endpoint("switch", traffic)})
            await asyncio.sleep(0.2)
        stop.set()
        await asyncio.gather(*clients)
        return seen

    seen = asyncio.run(scenario())
    assert len(seen) > 50
    assert {code for code, _ in seen} == {200}
    assert {text for _, text in seen} == {'{"backend":"v1"}', '{"backend":"v2"}'}


def test_acks_and_load_reports_reach_the_controller_under_the_proxy_id(stack: Stack) -> None:
    stack.serve(endpoint("reported", {"reported-v1": 1.0}), {"reported-v1": []})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        loads = ray.get(stack.controller.reported_loads.remote(), timeout=10)
        if "reported-v1" in loads.get("node-test", {}):
            break
        time.sleep(0.1)
    assert loads["node-test"]["reported-v1"] == (0, 0)
    acked = ray.get(stack.controller.acked.remote(), timeout=10)["node-test"]
    assert "endpoint:reported" in acked and acked["routes"] > 0
