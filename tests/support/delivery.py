"""A proxy delivering to answering replicas, and reads of what it delivered, for the delivery tests.

Moved out of tests/component/test_proxy_delivery.py, whose tests use them too."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import httpx

from proxy.app import ProxyApp
from proxy.observability.metrics import ShadowResult
from proxy.routes.subscriptions import Subscriptions
from proxy.settings import ProxySettings
from tests.support.proxy_app import FakeCaller, FakeReplica, replica_set
from vocabulary.control.longpoll import RouteEntry, RouteTable
from vocabulary.request_path.wire import WireRequest, WireResponse
from vocabulary.spec.endpoints import EndpointConfig


class Recorded:
    def __init__(self) -> None:
        self.compared: list[tuple[str, str, bool]] = []

    def request_done(self, endpoint: str, backend: str, code: int, duration_s: float) -> None:
        pass

    def shadow_done(self, endpoint: str, backend: str, result: ShadowResult) -> None:
        pass

    def shadow_compared(self, endpoint: str, backend: str, matched: bool) -> None:
        self.compared.append((endpoint, backend, matched))

def proxy(backends: dict[str, FakeReplica], **endpoint: Any) -> tuple[ProxyApp, Recorded]:
    recorded = Recorded()
    settings = ProxySettings()
    app = ProxyApp(FakeCaller(), settings, random.Random(0), recorded)
    subscriptions = Subscriptions(settings, random.Random(0))
    config = EndpointConfig.model_validate({"name": "e", "route": "/e", **endpoint})
    table = RouteTable(entries=(RouteEntry(route="/e", methods=config.methods, endpoint="e"),))
    answer: dict[str, tuple[int, Any]] = {"routes": (1, table), "endpoint:e": (2, config)}
    for n, (name, replica) in enumerate(backends.items(), start=3):
        answer[f"replicas:{name}"] = (n, replica_set(name, [replica]))
    app.install(subscriptions.apply(answer))
    return app, recorded

async def get_all(app: ProxyApp, headers: list[dict[str, str]]) -> list[httpx.Response]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
        return [await client.get("/e", headers=h) for h in headers]

def answering(body: Any, status: int = 200):
    async def handler(request: WireRequest) -> WireResponse:
        return status, [(b"content-type", b"application/json")], json.dumps(body).encode()
    return handler

async def settle(app: ProxyApp) -> None:
    """Wait for the shadow copies (and their comparisons) in flight."""
    await asyncio.wait_for(asyncio.gather(*app._shadow_tasks), timeout=5)
