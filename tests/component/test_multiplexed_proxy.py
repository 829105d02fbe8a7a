"""A multiplexed backend through the proxy's app with fake replicas that report the models they
hold: the proxy keeps each model where it is loaded, strips the report, counts per model, and
its metrics name only models a replica loaded; and a real replica host reports what it holds."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from proxy.observability.metrics import ProxyMetrics
from ray_gitops import registry
from ray_gitops.model_slots import ModelSlots, multiplexed
from ray_gitops.registry import current_model_id, current_request
from ray_gitops.serving import ModelRefused
from replica.host import call_handler
from tests.support.proxy_app import FakeReplica, Proxy, Served, get, lru_replica, run
from vocabulary.control.longpoll import ReplicaInfo, ReplicaSet
from vocabulary.request_path.multiplexing import RequestModels, parse_report, report
from vocabulary.request_path.wire import MODELS_HEADER, WireRequest, WireResponse
from vocabulary.spec.routing import MultiplexConfig


def multiplexed_proxy(
    replicas: list[FakeReplica], capacity: int, models: tuple[str, ...] = ("a", "b", "c", "d")
) -> tuple[Proxy, Served]:
    """`models`: the ids the backend declares (the only metric labels, and the only ids accepted)."""
    proxy = Proxy()
    served = Served()
    proxy.app.recorder = served
    proxy.serve("e", "/e", {"b": replicas})
    proxy.publish(replicas__b=ReplicaSet(
        backend="b", max_concurrent_queries=100, multiplex=MultiplexConfig(max_models_per_replica=capacity, models=models),
        replicas=tuple(ReplicaInfo(replica_id=r.name, actor_name=r.name, handle=r) for r in replicas),
    ))
    return proxy, served


def test_the_proxy_keeps_each_model_on_the_replica_that_loaded_it_and_strips_the_report() -> None:
    proxy, served = multiplexed_proxy([lru_replica("r0", 2), lru_replica("r1", 2)], 2)

    async def ask(model: str) -> str:
        response = await get(proxy, "/e", headers={"x-model-id": model})
        assert response.status_code == 200
        assert ":models" not in response.headers and ":load" not in response.headers
        return response.text

    homes = {model: {run(ask(model)) for _ in range(5)} for model in ["a", "b", "c", "d"]}
    assert all(len(home) == 1 for home in homes.values()), homes
    assert {next(iter(home)) for home in homes.values()} == {"r0", "r1"}
    loads = [entry for entry in served.served if entry[2]]
    assert sorted(entry[1] for entry in loads) == ["a", "b", "c", "d"]  # one load each, then hits
    assert len(served.served) == 20 and all(entry[3] == () for entry in served.served)
    slots = proxy.app.snapshot.pools["b"]._slots
    assert sorted(model for slot in slots for model in slot.models) == ["a", "b", "c", "d"]
    # The autoscaler's view: the hottest model's holders, not the average.
    assert proxy.app.backend_load()["b"]["hot"] == 0


def test_a_model_a_replica_never_loaded_is_no_metric_label() -> None:
    async def refuses(request: WireRequest) -> WireResponse:
        return 404, [(MODELS_HEADER, report([], RequestModels("made-up")))], b"no such model"

    proxy, served = multiplexed_proxy([FakeReplica("r0", refuses)], 2, models=())
    assert run(get(proxy, "/e", headers={"x-model-id": "made-up"})).status_code == 404
    assert served.served == []


def test_the_metrics_count_requests_loads_and_evictions_per_model() -> None:
    metrics = ProxyMetrics()
    metrics.model_served("b", "a", True, [])
    metrics.model_served("b", "a", False, [])
    metrics.model_served("b", "c", True, ["a"])
    text = metrics.render().decode()
    assert 'gitops_model_requests_total{backend="b",model="a"} 2.0' in text
    assert 'gitops_model_loads_total{backend="b",model="a"} 1.0' in text
    assert 'gitops_model_loads_total{backend="b",model="c"} 1.0' in text
    assert 'gitops_model_evictions_total{backend="b",model="a"} 1.0' in text
    metrics.forget_backend("b")
    assert 'model="a"' not in metrics.render().decode()


def test_a_multiplexed_replica_host_reads_the_model_id_and_reports_what_it_holds() -> None:
    async def load(model_id: str) -> str:
        return model_id.upper()

    slots: ModelSlots[str] = ModelSlots(load, 1)
    registry.install_multiplex("X-Adapter", 1)
    registry.register(slots.loaded)

    async def handler(request: object) -> dict[str, object]:
        model_id = current_model_id()
        assert model_id is not None
        return {"model": await slots.get(model_id, current_request())}

    async def two() -> list[WireResponse]:
        answers = []
        for model in ["a", "b"]:
            wire: WireRequest = ("GET", "/", b"", [(b"x-adapter", model.encode())], b"")
            answer = await call_handler(handler, wire, is_async=True)
            assert isinstance(answer, tuple)
            answers.append(answer)
        return answers

    try:
        first, second = asyncio.run(two())
    finally:
        registry._SETTINGS.clear()
        registry._HOLDERS.clear()
    assert first[2] == b'{"model":"A"}' and second[2] == b'{"model":"B"}'
    assert first[1][-1][0] == MODELS_HEADER
    one, two_ = parse_report(first[1][-1][1]), parse_report(second[1][-1][1])
    assert one is not None and one.loaded == {"a"} and one.loaded_now and one.evicted == ()
    assert two_ is not None and two_.loaded == {"b"} and two_.loaded_now and two_.evicted == ("a",)


def test_the_translators_example_serves_pairs_from_at_most_four_loaded() -> None:
    from deployments.apps import translators

    translators._LOAD_S = 0.0  # type: ignore[attr-defined]  # the example's pause, not under test
    registry.install_multiplex("X-Model-Id", 4)
    app = translators.Translators()

    async def ask(pair: str) -> WireResponse | object:
        wire: WireRequest = ("GET", "/translate", b"text=hello+cat", [(b"x-model-id", pair.encode())], b"")
        return await call_handler(app, wire, is_async=True)

    async def every_pair() -> list[object]:
        return [await ask(pair) for pair in ["en-fr", "en-de", "en-es", "en-it", "en-nl", "nope"]]

    try:
        answers = asyncio.run(every_pair())
    finally:
        registry._SETTINGS.clear()
        registry._HOLDERS.clear()
    first = answers[0]
    assert isinstance(first, tuple) and json.loads(first[2]) == {"pair": "en-fr", "text": "bonjour chat"}
    fifth = answers[4]
    assert isinstance(fifth, tuple)
    held = parse_report(fifth[1][-1][1])
    assert held is not None and held.loaded == {"en-de", "en-es", "en-it", "en-nl"} and held.evicted == ("en-fr",)
    refused = answers[5]
    assert isinstance(refused, tuple) and refused[0] == 404


def test_a_replica_host_refuses_an_id_from_elsewhere_than_the_checked_header() -> None:
    # The proxy checks the header; an id user code reads from a body (or a handle call's
    # argument) reaches the loader unchecked by it, and is refused there.
    config = MultiplexConfig(models=("en-fr", "en-de"))
    loaded: list[str] = []

    class Translators:
        @multiplexed
        async def model(self, model_id: str) -> str:
            loaded.append(model_id)
            return model_id

        async def __call__(self, request: Any) -> dict[str, str]:
            return {"model": await self.model((await request.body()).decode())}

    app = Translators()

    async def ask(model: str) -> object:
        wire: WireRequest = ("POST", "/", b"", [(b"x-model-id", b"en-fr")], model.encode())
        return await call_handler(app, wire, is_async=True)

    registry.install_multiplex(config.header, 2, config.id_rule().accepts, config.accepted())
    try:
        answer = asyncio.run(ask("en-de"))
        with pytest.raises(ModelRefused, match=r"'\.\./\.\./etc/passwd' refused"):
            asyncio.run(ask("../../etc/passwd"))
        with pytest.raises(ModelRefused, match=r"listed in models \(en-fr, en-de\)"):
            asyncio.run(ask("en-es"))
    finally:
        registry._SETTINGS.clear()
        registry._HOLDERS.clear()
    assert isinstance(answer, tuple) and json.loads(answer[2]) == {"model": "en-de"}
    assert loaded == ["en-de"]
