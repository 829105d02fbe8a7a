"""Many models per replica: the spec table, the replica's LRU of loaded models, and the
proxy's model-affinity routing (statistically: a skewed mix loads far fewer models than
random routing), the hot-model load the autoscaler sees, and the pool's optimistic view."""

from __future__ import annotations

import asyncio
import random
from collections import OrderedDict
from typing import Any

import pytest

from gitops.specs.documents import combine, parse_file
from gitops.specs.pins.pinned_models import bind_models
from proxy.pool.multiplexing import ModelAffinity, hot_ongoing
from proxy.pool.replicas import ReplicaPool
from ray_gitops import registry
from ray_gitops.model_slots import ModelSlots, multiplexed
from ray_gitops.serving import ModelRefused
from vocabulary.request_path.multiplexing import RequestModels, parse_report, report
from vocabulary.spec.backends import BackendConfig
from vocabulary.spec.routing import MultiplexConfig

IDS = ["b#r0", "b#r1"]


def _errors(data: bytes) -> list[str]:
    documents = combine({"deployments/m.toml": parse_file("deployments/m.toml", data)})
    return sorted(str(error) for error in documents.errors)


# --- the spec ------------------------------------------------------------------------


def test_a_multiplex_table_is_valid_with_defaults_and_checked_with_locations() -> None:
    ok = b'[backends.m]\nimport_path = "apps.m:M"\n\n[backends.m.multiplex]\nmax_models_per_replica = 4\n'
    assert _errors(ok) == []
    assert MultiplexConfig().header == "X-Model-Id" and MultiplexConfig().max_models_per_replica == 4
    bad_n = b'[backends.m]\nimport_path = "apps.m:M"\n\n[backends.m.multiplex]\nmax_models_per_replica = 0\n'
    (error,) = _errors(bad_n)
    assert error.startswith("deployments/m.toml:5:") and "max_models_per_replica" in error
    bad_header = b'[backends.m]\nimport_path = "apps.m:M"\n\n[backends.m.multiplex]\nheader = "x model"\n'
    (error,) = _errors(bad_header)
    assert "HTTP header name" in error and "deployments/m.toml:5:" in error


@pytest.mark.parametrize("other", ["[backends.m.routing]\npolicy = \"least_loaded\"\n", "[backends.m.batching]\n"])
def test_multiplex_excludes_routing_and_batching(other: str) -> None:
    spec = f'[backends.m]\nimport_path = "apps.m:M"\n\n[backends.m.multiplex]\n\n{other}'.encode()
    (error,) = _errors(spec)
    assert "multiplex and" in error and "deployments/m.toml" in error


def test_max_models_per_replica_is_part_of_the_version_and_the_header_is_not() -> None:
    base = BackendConfig(name="m", import_path="a:B", version="v1")
    four = bind_models(base.model_copy(update={"multiplex": MultiplexConfig()}), {})
    eight = bind_models(base.model_copy(update={"multiplex": MultiplexConfig(max_models_per_replica=8)}), {})
    other_header = bind_models(base.model_copy(update={"multiplex": MultiplexConfig(header="X-Adapter")}), {})
    assert bind_models(base, {}).version == "v1"
    assert four.version == "v1+x4" and eight.version == "v1+x8" and other_header.version == four.version


# --- the replica's loaded models --------------------------------------------------------


def _slots(capacity: int) -> tuple[ModelSlots[str], list[str]]:
    calls: list[str] = []

    async def load(model_id: str) -> str:
        calls.append(model_id)
        await asyncio.sleep(0)
        return f"weights of {model_id}"

    return ModelSlots(load, capacity), calls


def test_at_most_n_models_stay_loaded_least_recently_used_out_first() -> None:
    slots, calls = _slots(2)

    async def run() -> list[RequestModels]:
        records = []
        for model in ["a", "b", "a", "c", "b", "a"]:
            record = RequestModels(model)
            assert await slots.get(model, record) == f"weights of {model}"
            records.append(record)
        return records

    records = asyncio.run(run())
    # a, b loaded; a used again (b is now least recent); c evicts b; b evicts a; a evicts c.
    assert calls == ["a", "b", "c", "b", "a"]
    assert [(r.loaded, r.evicted) for r in records] == [
        (True, []), (True, []), (False, []), (True, ["b"]), (True, ["a"]), (True, ["c"]),
    ]
    assert slots.loaded() == ["b", "a"] and slots.loads == 5 and slots.evictions == 3


def test_concurrent_requests_for_one_model_load_it_once_and_a_failed_load_keeps_nothing() -> None:
    slots, calls = _slots(2)

    async def run() -> list[str]:
        return list(await asyncio.gather(*(slots.get("a") for _ in range(5))))

    assert asyncio.run(run()) == ["weights of a"] * 5 and calls == ["a"]

    async def failing(model_id: str) -> str:
        raise FileNotFoundError(model_id)

    broken: ModelSlots[str] = ModelSlots(failing, 2)
    with pytest.raises(FileNotFoundError):
        asyncio.run(broken.get("x"))
    assert broken.loaded() == []


def test_an_evicted_model_is_unloaded() -> None:
    unloaded: list[str] = []

    class Model:
        def __init__(self, name: str) -> None:
            self.name = name

        async def unload(self) -> None:
            unloaded.append(self.name)

    async def load(model_id: str) -> Model:
        return Model(model_id)

    slots: ModelSlots[Model] = ModelSlots(load, 1)

    async def run() -> None:
        await slots.get("a")
        await slots.get("b")

    asyncio.run(run())
    assert unloaded == ["a"]


def test_the_decorator_reads_n_from_the_backend_and_refuses_without_a_table() -> None:
    class Server:
        @multiplexed
        async def load(self, model_id: str) -> str:
            return model_id.upper()

    registry._SETTINGS.clear()
    with pytest.raises(RuntimeError, match=r"no \[backends.NAME.multiplex\] table"):
        asyncio.run(Server().load("a"))
    registry.install_multiplex("X-Model-Id", 1)
    try:
        server = Server()
        record = registry.begin_models([(b"x-model-id", b"a")])
        assert record is not None and registry.current_model_id() == "a"
        assert asyncio.run(server.load("a")) == "A"
        assert asyncio.run(server.load("b")) == "B"
        assert "b" in registry.loaded_ids() and "a" not in registry.loaded_ids()
    finally:
        registry._SETTINGS.clear()
        registry._HOLDERS.clear()
    with pytest.raises(TypeError, match="async"):
        multiplexed(lambda model_id: model_id)  # type: ignore[arg-type, return-value]


def test_a_report_survives_the_wire_and_garbage_is_no_report() -> None:
    record = RequestModels("a", loaded=True, evicted=["z"])
    parsed = parse_report(report(["a", "b"], record))
    assert parsed is not None and parsed.loaded == {"a", "b"} and parsed.loaded_now and parsed.evicted == ("z",)
    assert parse_report(b"not json") is None and parse_report(b'{"a": 1}') is None


# --- the proxy's routing -----------------------------------------------------------------


def test_a_model_goes_to_the_replica_that_holds_it_unless_that_one_is_overloaded() -> None:
    policy, rng = ModelAffinity(), random.Random(0)
    policy.members(IDS)
    loaded: list[set[str]] = [{"a"}, {"b"}]
    assert all(policy.choose([1, 0], 10, "a", rng, loaded) == 0 for _ in range(20))  # busier, but holds it
    assert policy.choose([3, 1], 10, "a", rng, loaded) == 1  # 3 > 2 x 1: overloaded, the least loaded takes it
    assert policy.choose([2, 1], 10, "a", rng, loaded) == 0
    assert policy.choose([10, 0], 10, "a", rng, loaded) == 1  # full
    assert policy.choose([10, 10], 10, "a", rng, loaded) is None
    # A model nobody holds: the least loaded; among equals the one holding fewer
    # models, then the model's own favourite (the same in every proxy).
    assert policy.choose([0, 0], 10, "c", rng, [{"a", "x"}, {"b"}]) == 1
    assert policy.choose([0, 1], 10, "c", rng, [{"a"}, set()]) == 0
    other = ModelAffinity()
    other.members(IDS)
    favourites = {m: policy.choose([0, 0], 10, m, rng, [set(), set()]) for m in map(str, range(200))}
    assert favourites == {m: other.choose([0, 0], 10, m, random.Random(9), [set(), set()]) for m in favourites}
    assert 60 < sum(favourites.values()) < 140  # spread over both


def _simulate(route: str, requests: int, seed: int) -> int:
    """Loads of `requests` sequential requests over 8 models (Zipf-like mix), 2 replicas of 4 slots."""
    rng = random.Random(seed)
    models = [f"m{n}" for n in range(8)]
    weights = [1 / (n + 1) ** 1.2 for n in range(8)]
    replicas: list[OrderedDict[str, None]] = [OrderedDict(), OrderedDict()]
    policy = ModelAffinity()
    policy.members(IDS)
    loads = 0
    for _ in range(requests):
        model = rng.choices(models, weights)[0]
        if route == "affinity":
            index = policy.choose([0, 0], 10, model, rng, [set(r) for r in replicas])
            assert index is not None
        else:
            index = rng.randrange(2)
        held = replicas[index]
        if model in held:
            held.move_to_end(model)
            continue
        loads += 1
        held[model] = None
        if len(held) > 4:
            held.popitem(last=False)
    return loads


def test_affinity_loads_far_fewer_models_than_random_routing_on_a_skewed_mix() -> None:
    affinity = [_simulate("affinity", 1000, seed) for seed in range(5)]
    spread = [_simulate("random", 1000, seed) for seed in range(5)]
    # 8 models fit in 2 x 4 slots: with affinity each loads once; at random the
    # cold models keep evicting each other on both replicas.
    assert max(affinity) == 8
    assert min(spread) > 10 * max(affinity)


def test_the_hot_models_load_is_what_the_autoscaler_sees() -> None:
    # One hot model on one replica of four: the total (8) says 2 a replica, the hot one 8.
    assert hot_ongoing([8, 0, 0, 0], [{"hot"}, {"b"}, {"c"}, set()]) == 32
    assert hot_ongoing([2, 2, 2, 2], [{"a"}, {"b"}, {"c"}, {"d"}]) == 8  # even: the total
    assert hot_ongoing([5], [{"a"}]) == 5
    assert hot_ongoing([0, 0], [set(), set()]) == 0


# --- the pool -------------------------------------------------------------------------------


class _Handle:
    pass


def _pool() -> ReplicaPool:
    pool = ReplicaPool("m", random.Random(0), max_queued=10, max_concurrent=10)
    handles: Any = [(rid, _Handle()) for rid in IDS]
    pool.update(10, handles, multiplex=MultiplexConfig(header="X-Adapter"))
    return pool


def test_the_pool_reads_the_configured_header_and_keeps_a_model_where_it_was_sent() -> None:
    pool = _pool()
    request = ("GET", "/", b"", [(b"x-adapter", b"m7")], b"")
    key = pool.request_key(request)
    assert key == b"m7" and pool.request_key(("GET", "/", b"", [(b"x-model-id", b"m7")], b"")) is None
    first = pool.try_acquire(key)
    assert first is not None and "m7" in first.models
    pool.release(first)
    # Busier now, the same replica still takes the model: it has it (an answer confirms it later).
    other = next(slot for slot in pool._slots if slot is not first)
    other_held = pool.try_acquire(b"other")
    assert other_held is other
    first.in_flight += 1
    assert pool.try_acquire(key) is first
    first.note_models(report([], RequestModels("x", loaded=False)))  # the replica says what it holds
    assert first.models == frozenset()


def test_the_loader_refuses_an_id_its_backend_does_not_accept_before_loading_it() -> None:
    loaded: list[str] = []

    class Server:
        @multiplexed
        async def load(self, model_id: str) -> str:
            loaded.append(model_id)
            return model_id.upper()

    default, listed = MultiplexConfig(), MultiplexConfig(models=("en-fr", "en-de"), model_pattern="[a-z]{2}-[a-z]{2}")
    try:
        registry.install_multiplex(default.header, 2, default.id_rule().accepts, default.accepted())
        server = Server()
        assert asyncio.run(server.load("m0")) == "M0"
        for bad in ["../../etc/passwd", "", "a" * 200, "x\ny"]:
            with pytest.raises(ModelRefused, match=r"refused: this backend accepts ids matching model_pattern"):
                asyncio.run(server.load(bad))
        registry.install_multiplex(listed.header, 2, listed.id_rule().accepts, listed.accepted())
        with pytest.raises(ModelRefused, match=r"'en-es' refused: .* and listed in models \(en-fr, en-de\)"):
            asyncio.run(Server().load("en-es"))
        assert asyncio.run(Server().load("en-de")) == "EN-DE"
    finally:
        registry._SETTINGS.clear()
        registry._HOLDERS.clear()
    assert loaded == ["m0", "en-de"]  # no refused id reached the loader
    assert issubclass(ModelRefused, ValueError)


def test_an_id_rule_is_the_configs_rule_built_once() -> None:
    config = MultiplexConfig(models=tuple(f"m{i}" for i in range(50)))
    rule = config.id_rule()
    for model in ["m0", "m49", "m50", "../x", ""]:
        assert rule.accepts(model) == config.accepts(model)
        assert rule.label(model) == config.label(model)
    assert rule.accepts("m49") and not rule.accepts("m50") and rule.label("m50") == "other"
    assert MultiplexConfig().id_rule().accepts("anything-safe") and MultiplexConfig().id_rule().label("x") == "other"
