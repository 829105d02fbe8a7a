"""Proxy edge cases over real HTTP with real replica actors, fed by a fake long poll.

Most real-tier proxy tests run through the real controller
(test_proxy_with_controller.py). These need what it cannot give: a proxy
with tiny queue bounds, a backend with no replica at all, and a controller
that has not yet noticed a replica's death — so a small fake plays the
controller's long poll and publishes exactly the payloads each test needs.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator

import httpx
import pytest
import ray

from httpedge.limits import EdgeLimits
from proxy.actor import ProxyActor
from proxy.settings import ProxySettings
from replica.host import Replica
from vocabulary.spec.backends import BackendConfig
from tests.real.apps.proxy_fakes import FakeController
from tests.support.listeners import RawClient
from vocabulary.control.longpoll import ReplicaInfo, ReplicaSet, RouteEntry, RouteTable
from vocabulary.spec.endpoints import EndpointConfig

pytestmark = pytest.mark.real

APPS = "tests.real.apps.proxy_handlers"
SETTINGS = ProxySettings(
    max_body_bytes=64 * 1024, max_queued_per_backend=2, max_shadow_in_flight=2,
    edge=EdgeLimits(header_timeout_s=1.0, body_timeout_s=1.0),
)


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
                BackendConfig(name=backend, version="v", import_path=f"{APPS}:{handler}", init_args=init_args),
                replica_id,
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


# --- backpressure and dead replicas -----------------------------------------------------


def test_no_ready_replica_is_503_with_retry_after(stack: Stack) -> None:
    stack.serve(endpoint("empty", {"empty-v1": 1.0}), {"empty-v1": []})
    response = httpx.get(f"{stack.url}/empty", timeout=10)
    assert response.status_code == 503 and response.headers["retry-after"] == "1"


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


def test_a_replica_that_died_is_dropped_before_the_controller_notices(stack: Stack) -> None:
    stack.serve(endpoint("fragile", {"fragile-v1": 1.0}), {"fragile-v1": stack.start_replicas("fragile-v1", "Mortal")})
    assert httpx.post(f"{stack.url}/fragile?die=1", timeout=20).status_code == 502
    # The (fake) controller still lists the dead replica; the proxy no longer uses it: it was the backend's
    # last, so the next request is held for the controller's replacement, and served by it once it runs.
    with ThreadPoolExecutor(1) as client:
        held = client.submit(httpx.get, f"{stack.url}/fragile", timeout=30)
        time.sleep(1.0)
        assert not held.done()
        replacement = stack.start_replicas("fragile-v1", "Mortal")
        stack.serve(endpoint("fragile", {"fragile-v1": 1.0}), {"fragile-v1": replacement})
        assert held.result().status_code == 200


def test_acks_reach_the_controller_under_the_proxy_id(stack: Stack) -> None:
    stack.serve(endpoint("acked", {"acked-v1": 1.0}), {"acked-v1": []})
    acked = ray.get(stack.controller.acked.remote(), timeout=10)["node-test"]
    assert "endpoint:acked" in acked and acked["routes"] > 0


# --- hostile clients (issue 11 rows 6, 8, 9) ---------------------------------------------


def port_of(stack: Stack) -> int:
    return int(stack.url.rsplit(":", 1)[1])


def test_a_body_cut_off_by_its_client_never_reaches_the_replica(stack: Stack) -> None:
    stack.serve(endpoint("kept", {"kept-v1": 1.0}), {"kept-v1": stack.start_replicas("kept-v1", "Keeps")})
    cut = RawClient(port_of(stack))
    cut.send(b"POST /kept HTTP/1.1\r\nHost: proxy\r\nContent-Length: 1000\r\n\r\n" + b"h" * 500)
    cut.close()
    assert httpx.post(f"{stack.url}/kept", content=b"whole", timeout=20).json() == {"bodies": ["whole"]}


def test_a_body_slower_than_the_deadline_is_408_and_never_reaches_the_replica(stack: Stack) -> None:
    stack.serve(endpoint("slowbody", {"slowbody-v1": 1.0}),
                {"slowbody-v1": stack.start_replicas("slowbody-v1", "Keeps")})
    client = RawClient(port_of(stack))
    client.send(b"POST /slowbody HTTP/1.1\r\nHost: proxy\r\nContent-Length: 100\r\n\r\n")
    client.drip(b"d" * 100, every_s=0.1, until_s=5)
    assert client.answer()[0] == 408 and client.elapsed() < 3
    client.close()
    assert httpx.get(f"{stack.url}/slowbody", timeout=20).json() == {"bodies": []}


def test_a_dripped_header_is_408_within_the_deadline(stack: Stack) -> None:
    client = RawClient(port_of(stack))
    client.drip(b"GET /-/healthz HTTP/1.1\r\nHost: proxy\r\nX-Slow: " + b"a" * 200, every_s=0.1, until_s=5)
    assert client.answer()[0] == 408 and client.elapsed() < 3
    client.close()


def test_a_header_above_64_kib_is_431(stack: Stack) -> None:
    client = RawClient(port_of(stack))
    client.send(b"GET /-/healthz HTTP/1.1\r\nHost: proxy\r\nX-Big: " + b"a" * (65 * 1024) + b"\r\n\r\n")
    assert client.answer()[0] == 431
    client.close()


def test_an_encoded_dot_segment_is_400(stack: Stack) -> None:
    stack.serve(endpoint("inner", {"inner-v1": 1.0}), {"inner-v1": stack.start_replicas("inner-v1", "Echo")})
    client = RawClient(port_of(stack))
    client.send(b"GET /inner/%2e%2e/-/routes HTTP/1.1\r\nHost: proxy\r\n\r\n")
    assert client.answer()[0] == 400
    client.close()
