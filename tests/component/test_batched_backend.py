"""A batched backend through the proxy's app, coalescer and a real replica host, in-process.

Only Ray is replaced: the transport calls the replica host's methods directly.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

import httpx
import pytest
from starlette.requests import Request

from proxy.app import ProxyApp
from proxy.pool.replica_calls import ReplicaCalls
from proxy.routes.subscriptions import Subscriptions
from proxy.settings import ProxySettings
from replica.host import Replica
from vocabulary.control.actor_apis import ReplicaHandle
from vocabulary.control.longpoll import ReplicaInfo, ReplicaSet, RouteEntry, RouteTable
from vocabulary.request_path.wire import CallResult, TimedRequest, WireRequest, WireResponse
from vocabulary.spec.backends import BackendConfig, BatchingConfig
from vocabulary.spec.endpoints import EndpointConfig


class Upper:
    """Answers each body upper-cased; records the sizes of the lists it received."""

    sizes: list[int] = []

    async def __call__(self, requests: list[Request]) -> list[str]:
        Upper.sizes.append(len(requests))
        return [(await request.body()).decode().upper() for request in requests]


class DropsOne:
    async def __call__(self, requests: list[Request]) -> list[str]:
        return ["x"] * (len(requests) - 1)


class InProcess:
    """The replica calls of `proxy.shell.raycalls.RayMethods`, without Ray."""

    async def one(self, handle: ReplicaHandle, request: WireRequest) -> WireResponse:
        return await handle.actor.handle_request(request)

    async def coalesced(self, handle: ReplicaHandle, items: list[TimedRequest]) -> list[CallResult]:
        return await handle.actor.handle_coalesced(items)

    async def batch(self, handle: ReplicaHandle, items: list[TimedRequest]) -> list[CallResult]:
        return await handle.actor.handle_batch(items)


async def post_all(handler: str, bodies: list[str]) -> list[httpx.Response]:
    replica = Replica(BackendConfig(name="model", version="v1", import_path=f"{__name__}:{handler}"), "r1")
    await replica.initialize()
    settings, rng = ProxySettings(), random.Random(0)
    app = ProxyApp(ReplicaCalls(InProcess(), 1, 0.005), settings, rng, None)
    subscriptions = Subscriptions(settings, rng)
    route = RouteTable(entries=(RouteEntry(route="/m", methods=("POST",), endpoint="m"),))
    endpoint = EndpointConfig(name="m", route="/m", methods=("POST",), traffic={"model": 1.0})
    replicas = ReplicaSet(
        backend="model", max_concurrent_queries=100,
        replicas=(ReplicaInfo(replica_id="r1", actor_name="r1", handle=replica),),
        batching=BatchingConfig(max_batch_size=8, batch_wait_timeout_s=0.05),
    )
    app.install(subscriptions.apply({"routes": (1, route), "endpoint:m": (2, endpoint), "replicas:model": (3, replicas)}))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
        return list(await asyncio.gather(*(client.post("/m", content=body) for body in bodies)))


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_requests_arriving_together_reach_the_handler_as_one_list_and_get_their_own_answers() -> None:
    Upper.sizes = []
    responses = run(post_all("Upper", ["a", "b", "c"]))
    assert [(r.status_code, r.text) for r in responses] == [(200, "A"), (200, "B"), (200, "C")]
    assert Upper.sizes == [3]


def test_a_wrong_length_result_is_500_for_every_request_with_one_clear_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR):
        responses = run(post_all("DropsOne", ["a", "b", "c"]))
    assert [r.status_code for r in responses] == [500, 500, 500]
    assert "Traceback" not in responses[0].text
    assert "backend model: the batch handler returned 2 results for 3 requests" in caplog.text
