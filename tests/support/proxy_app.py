"""The proxy app over fake replicas and callers, run in one process, for the proxy tests of every tier;
and a multiplexed fake replica with a real LRU (`lru_replica`) with a recorder of its models (`Served`).

Moved out of tests/component/test_proxy_app.py, whose tests use them too."""

from __future__ import annotations

import asyncio
import json
import random
from collections import OrderedDict
from typing import Any, Awaitable, Callable, Sequence

import httpx

from proxy.app import NullRecorder, ProxyApp
from proxy.observability.metrics import ShadowResult
from proxy.pool.calling import Batching
from proxy.routes.subscriptions import Subscriptions
from proxy.settings import ProxySettings
from vocabulary.control.actor_apis import ReplicaHandle
from vocabulary.control.longpoll import ReplicaInfo, ReplicaSet, RouteEntry, RouteTable
from vocabulary.request_path.multiplexing import RequestModels
from vocabulary.request_path.wire import LOAD_HEADER, MODELS_HEADER, WireRequest, WireResponse
from vocabulary.spec.endpoints import EndpointConfig

Handler = Callable[[WireRequest], Awaitable[WireResponse]]

class FakeReplica:
    """A replica whose behaviour is a coroutine; records what it saw."""

    def __init__(self, name: str, handler: Handler | None = None) -> None:
        self.name = name
        self.handler = handler or self.answer_name
        self.seen: list[WireRequest] = []
        self.cancelled = 0

    async def answer_name(self, request: WireRequest) -> WireResponse:
        return 200, [(b"content-type", b"text/plain")], self.name.encode()

class FakeCaller:
    async def call(
        self, handle: ReplicaHandle, request: WireRequest, timeout_s: float, batching: Batching | None = None
    ) -> WireResponse:
        handle.actor.seen.append(request)
        try:
            return await handle.actor.handler(request)
        except asyncio.CancelledError:
            handle.actor.cancelled += 1
            raise

class Recorded(NullRecorder):
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, int]] = []
        self.shadows: list[tuple[str, str, str]] = []
        self.limited: list[str] = []

    def rate_limited(self, endpoint: str) -> None:
        self.limited.append(endpoint)

    def request_done(self, endpoint: str, backend: str, code: int, duration_s: float) -> None:
        self.requests.append((endpoint, backend, code))

    def shadow_done(self, endpoint: str, backend: str, result: ShadowResult) -> None:
        self.shadows.append((endpoint, backend, result))

class Proxy:
    """An app plus the long-poll state feeding it, driven by the test."""

    def __init__(self, settings: ProxySettings = ProxySettings()) -> None:
        self.recorded = Recorded()
        rng = random.Random(0)
        self.app = ProxyApp(FakeCaller(), settings, rng, self.recorded)
        self.subscriptions = Subscriptions(settings, rng)
        self._next_id = 0

    def publish(self, **updates: Any) -> None:
        answer = {}
        for key, payload in updates.items():
            self._next_id += 1
            answer[key.replace("__", ":")] = (self._next_id, payload)
        self.app.install(self.subscriptions.apply(answer))

    def serve(
        self, name: str, route: str, backends: dict[str, list[FakeReplica]], *,
        traffic: dict[str, float] | None = None, shadow: dict[str, float] | None = None,
        methods: tuple[str, ...] = ("GET", "POST"), timeout_s: float = 5.0, cap: int = 100, **endpoint: Any,
    ) -> None:
        """`endpoint`: further keys of its `EndpointConfig` (`retries=RetriesConfig(...)`, ...)."""
        traffic = traffic or {next(iter(backends)): 1.0}
        config = EndpointConfig(name=name, route=route, methods=methods, traffic=traffic,
                                shadow=shadow or {}, timeout_s=timeout_s, **endpoint)
        table = RouteTable(entries=(RouteEntry(route=route, methods=methods, endpoint=name),))
        self.publish(routes=table, **{f"endpoint__{name}": config})
        self.publish(**{f"replicas__{b}": replica_set(b, reps, cap) for b, reps in backends.items()})

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://proxy")

def replica_set(backend: str, replicas: list[FakeReplica], cap: int = 100) -> ReplicaSet:
    return ReplicaSet(
        backend=backend, max_concurrent_queries=cap,
        replicas=tuple(ReplicaInfo(replica_id=r.name, actor_name=r.name, handle=r) for r in replicas),
    )

def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)

async def get(proxy: Proxy, path: str, **kwargs: Any) -> httpx.Response:
    async with proxy.client() as client:
        return await client.get(path, **kwargs)


class Served(NullRecorder):
    """A recorder that keeps what multiplexed requests were counted under: (backend, model, loaded, evicted)."""

    def __init__(self) -> None:
        self.served: list[tuple[str, str, bool, tuple[str, ...]]] = []

    def model_served(self, backend: str, model: str, loaded: bool, evicted: Sequence[str]) -> None:
        self.served.append((backend, model, loaded, tuple(evicted)))


def lru_replica(name: str, capacity: int) -> FakeReplica:
    """A fake replica with a real LRU of `capacity` models, reporting as a multiplexed replica does."""
    held: OrderedDict[str, None] = OrderedDict()

    async def handler(request: WireRequest) -> WireResponse:
        model = dict(request[3]).get(b"x-model-id", b"").decode()
        record = RequestModels(model or None)
        if model and model in held:
            held.move_to_end(model)
        elif model:
            held[model] = None
            record.loaded = True
            while len(held) > capacity:
                record.evicted.append(held.popitem(last=False)[0])
        value = json.dumps([list(held), record.loaded, record.evicted]).encode()
        return 200, [(b"content-type", b"text/plain"), (LOAD_HEADER, b"1.0"), (MODELS_HEADER, value)], name.encode()

    return FakeReplica(name, handler)
