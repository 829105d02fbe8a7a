"""LoRA adapters of an [llm] backend, without I/O: the spec rule (`llm_problem`, the routing
exclusion), the proxy pool routing an adapter's requests by the JSON body's `model` to the
replica that has it loaded (and everything else by power_of_two), what the controller
publishes to the proxies, the CPU engine's adapter changing its output deterministically
without touching the base model, and the vLLM adapter's LoRA calls against a stand-in of
vLLM's interfaces (vLLM itself is checked by `make test-vllm`, in a venv of its own)."""

from __future__ import annotations

import asyncio
import json
import random
import sys
import types
from collections import Counter
from typing import Any

import pytest

from controller.state.publishing import Publisher
from proxy.pool.replicas import ReplicaPool
from ray_gitops.llm.engine import EngineRefused, Prompt, SamplingParams
from ray_gitops.llm.ngram import AdaptedModel, NgramEngine, NgramModel
from ray_gitops.llm.vllm_engine import VLLMEngine, engine_kwargs, lora_request_kwargs
from vocabulary.request_path.multiplexing import RequestModels, report
from vocabulary.spec.backends import BackendConfig
from vocabulary.spec.llm import LLMConfig, adapter_models, llm_problem

BASE = "the cat sat on the mat . the dog sat on the log . " * 20
ADAPTER = "the cat chased a red laser dot across the kitchen floor . " * 5


# --- the spec ------------------------------------------------------------------------------------


def _llm(**fields: Any) -> LLMConfig:
    return LLMConfig.model_validate({"engine": "ngram", "model": "base", **fields})


def test_each_adapter_is_one_of_the_backends_models_named_once_and_not_the_base() -> None:
    models = ["base", "sql", "chat"]
    assert llm_problem(_llm(lora_adapters=["sql", "chat"]), models, None, {}) is None
    assert llm_problem(_llm(lora_adapters=["nope"]), models, None, {}) == (
        "llm.lora_adapters: 'nope' is not in this backend's models: add it (models = [..., \"nope\"]), "
        "declared as a [models.nope] table"
    )
    assert llm_problem(_llm(lora_adapters=["sql", "sql"]), models, None, {}) == "llm.lora_adapters names 'sql' twice"
    assert "is the base model (llm.model)" in (llm_problem(_llm(lora_adapters=["base"]), models, None, {}) or "")
    served = _llm(lora_adapters=["chat"], served_model_name="chat")
    assert "the base model's served name" in (llm_problem(served, models, None, {}) or "")
    assert llm_problem(_llm(engine_args={"max_loras": 2}), models, None, {}) == (
        "llm.engine_args.max_loras: write it as llm.max_loras"
    )
    assert adapter_models(_llm(lora_adapters=["sql"])) == {"sql"} and adapter_models(None) == frozenset()


def test_a_backend_with_adapters_takes_no_routing_table() -> None:
    with pytest.raises(ValueError, match="lora_adapters and routing cannot both be set"):
        BackendConfig.model_validate({
            "name": "chat", "import_path": "a:B", "version": "v1", "models": ["base", "sql"],
            "llm": {"engine": "ngram", "model": "base", "lora_adapters": ["sql"]},
            "routing": {"policy": "round_robin"},
        })


# --- what the proxies are told, and the pool -----------------------------------------------------


class _LongPoll:
    def __init__(self) -> None:
        self.published: dict[str, Any] = {}

    def fingerprint(self, key: str) -> Any:
        return None

    def publish(self, key: str, payload: Any, fingerprint: Any) -> None:
        self.published[key] = payload


class _Backends:
    def __init__(self, config: BackendConfig) -> None:
        self._config = config

    def names(self) -> list[str]:
        return [self._config.name]

    def running(self, name: str) -> list[Any]:
        return []

    def config(self, name: str) -> BackendConfig:
        return self._config


def test_the_controller_publishes_an_llm_backends_adapters_to_the_proxies() -> None:
    config = BackendConfig.model_validate({
        "name": "chat", "import_path": "a:B", "version": "v1", "models": ["base", "sql"],
        "llm": {"engine": "ngram", "model": "base", "lora_adapters": ["sql"]},
    })
    longpoll = _LongPoll()
    Publisher(longpoll, lambda name: None).replicas(_Backends(config))  # type: ignore[arg-type]
    (replica_set,) = longpoll.published.values()
    assert replica_set.llm_adapters == ("sql",) and replica_set.multiplex is None


class _Handle:
    pass


def _pool() -> ReplicaPool:
    pool = ReplicaPool("chat", random.Random(0), max_queued=10, max_concurrent=10)
    handles: Any = [(rid, _Handle()) for rid in ("chat#r0", "chat#r1")]
    pool.update(10, handles, llm_adapters=("sql", "poet"))
    return pool


def _chat(model: str) -> Any:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]}).encode()
    return ("POST", "/v1/chat/completions", b"", [(b"content-type", b"application/json")], body)


def test_the_pool_keys_an_adapters_requests_by_the_json_model_and_nothing_else() -> None:
    pool = _pool()
    assert pool.by_model() and pool.request_key(_chat("sql")) == b"sql"
    assert pool.request_key(_chat("base")) is None  # the base model: power_of_two
    assert pool.request_key(_chat("gpt-4o")) is None  # unknown: the replica answers 404
    assert pool.request_key(("POST", "/v1/chat/completions", b"", [], b"not json")) is None
    # The model read from the body is the one a full parse reads, wherever it is in the object.
    late = json.dumps({"messages": [{"role": "user", "content": "\"model\": \"poet\""}], "model": "sql"}).encode()
    assert pool.request_key(("POST", "/v1/completions", b"", [], late)) == b"sql"
    pool.update(10, [(rid, _Handle()) for rid in ("chat#r0", "chat#r1")])  # type: ignore[misc]
    assert not pool.by_model() and pool.request_key(_chat("sql")) is None


def test_an_adapters_requests_stay_on_the_replica_that_loaded_it_while_the_base_spreads() -> None:
    pool = _pool()
    homes: dict[str, Counter[str]] = {"sql": Counter(), "poet": Counter(), "base": Counter()}
    for _ in range(20):
        for model in ("sql", "poet", "base"):
            slot = pool.try_acquire(pool.request_key(_chat(model)))
            assert slot is not None
            homes[model][slot.replica_id] += 1
            if model != "base":  # the replica's answer: what it holds now
                slot.note_models(report(sorted(slot.models), RequestModels(model)))
            pool.release(slot)
    assert len(homes["sql"]) == 1 and len(homes["poet"]) == 1, homes
    assert set(homes["sql"]) != set(homes["poet"])  # two adapters, two idle replicas: one each
    assert len(homes["base"]) == 2, homes  # the base model is held by every replica: power_of_two


# --- the CPU engine's adapters -----------------------------------------------------------------------


async def _complete(engine: NgramEngine, prompt: str, adapter: str | None = None) -> str:
    params = SamplingParams(max_tokens=6, temperature=0)
    deltas = engine.generate(Prompt(text=prompt), params, "r", adapter=adapter)
    return "".join([delta.text async for delta in deltas])


def test_an_adapters_text_changes_the_cpu_engines_output_and_the_base_stays_as_it_was(tmp_path: Any) -> None:
    (tmp_path / "laser.txt").write_text(ADAPTER)
    engine = NgramEngine(BASE, "base")
    base_model = engine.model

    async def run() -> tuple[str, str, str, str]:
        before = await _complete(engine, "the cat")
        await engine.load_adapter("laser", str(tmp_path / "laser.txt"))
        adapted = await _complete(engine, "the cat", "laser")
        after = await _complete(engine, "the cat")
        await engine.unload_adapter("laser")
        return before, adapted, after, str(engine.adapters())

    before, adapted, after, left = asyncio.run(run())
    assert before == " sat on the log. the"
    assert adapted == " chased a red laser dot across"  # the adapter's continuation, greedily
    assert after == before and engine.model is base_model and left == "[]"


def test_the_adapted_model_adds_the_adapters_counts_scaled_where_it_knows_the_context() -> None:
    base, adapter = NgramModel(BASE), NgramModel(ADAPTER)
    adapted = AdaptedModel(base, adapter, scale=100)
    # "the" is followed by cat/dog/mat/log in the base; the adapter's "the cat" / "the kitchen" weigh 100 x.
    followers = dict(adapted.followers(["the"]))
    assert followers["cat"] == dict(base.followers(["the"]))["cat"] + 100 * dict(adapter.followers(["the"]))["cat"]
    assert followers["kitchen"] == 100 * 5 and followers["dog"] == dict(base.followers(["the"]))["dog"]
    # A context only the base knows is the base's alone.
    assert adapted.followers(["the", "dog"]) == base.followers(["the", "dog"])


# --- the vLLM adapter, against a stand-in of vLLM's interfaces (vLLM itself: `make test-vllm`) ---------


def test_vllm_gets_enable_lora_and_max_loras_and_a_lora_request_per_adapter() -> None:
    kwargs = engine_kwargs("/cache/m", "llama", 1, None, {"max_lora_rank": 64}, max_loras=2)
    assert (kwargs["enable_lora"], kwargs["max_loras"], kwargs["max_lora_rank"]) == (True, 2, 64)
    assert "enable_lora" not in engine_kwargs("/cache/m", "llama", 1, None, {})
    assert lora_request_kwargs("sql", 3, "/cache/sql") == {"lora_name": "sql", "lora_int_id": 3, "lora_path": "/cache/sql"}


class _LoRARequest:
    def __init__(self, lora_name: str, lora_int_id: int, lora_path: str) -> None:
        self.lora_name, self.lora_int_id, self.lora_path = lora_name, lora_int_id, lora_path


class _Output:
    def __init__(self, text: str) -> None:
        self.outputs = [types.SimpleNamespace(text=text, token_ids=[1], finish_reason="length")]
        self.prompt_token_ids = [1, 2]
        self.finished = True


class _AsyncLLM:
    """What the adapter calls of vLLM's async engine, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def add_lora(self, request: _LoRARequest) -> bool:
        self.calls.append(("add_lora", (request.lora_name, request.lora_int_id, request.lora_path)))
        return True

    async def remove_lora(self, lora_id: int) -> bool:
        self.calls.append(("remove_lora", lora_id))
        return True

    async def generate(self, prompt: str, sampling: Any, request_id: str, lora_request: Any = None) -> Any:
        self.calls.append(("generate", None if lora_request is None else lora_request.lora_name))
        yield _Output("x")

    async def abort(self, request_id: str) -> None:
        self.calls.append(("abort", request_id))


def test_the_vllm_adapter_loads_an_adapter_into_the_running_engine_and_generates_with_its_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = types.ModuleType("vllm")
    fake.SamplingParams = lambda **kwargs: kwargs  # type: ignore[attr-defined]
    sampling = types.ModuleType("vllm.sampling_params")
    sampling.RequestOutputKind = types.SimpleNamespace(DELTA="delta")  # type: ignore[attr-defined]
    lora = types.ModuleType("vllm.lora.request")
    lora.LoRARequest = _LoRARequest  # type: ignore[attr-defined]
    for name, module in {"vllm": fake, "vllm.sampling_params": sampling, "vllm.lora": types.ModuleType("vllm.lora"),
                         "vllm.lora.request": lora}.items():
        monkeypatch.setitem(sys.modules, name, module)
    engine = object.__new__(VLLMEngine)  # its constructor starts vLLM: the state it sets, by hand
    inner = _AsyncLLM()
    engine._engine, engine._names, engine._tokenizer, engine._loras, engine._next_lora_id = inner, ["m"], None, {}, 1

    async def run() -> None:
        await engine.load_adapter("sql", "/cache/sql")
        await engine.load_adapter("poet", "/cache/poet")
        assert list(engine.adapters()) == ["sql", "poet"]
        assert [d.text async for d in engine.generate(Prompt(text="hi"), SamplingParams(max_tokens=1), "a", "sql")]
        assert [d.text async for d in engine.generate(Prompt(text="hi"), SamplingParams(max_tokens=1), "b")]
        await engine.unload_adapter("sql")
        with pytest.raises(EngineRefused, match="not loaded"):
            await engine.generate(Prompt(text="hi"), SamplingParams(max_tokens=1), "c", "sql").__anext__()

    asyncio.run(run())
    assert inner.calls == [
        ("add_lora", ("sql", 1, "/cache/sql")), ("add_lora", ("poet", 2, "/cache/poet")),
        ("generate", "sql"), ("generate", None), ("remove_lora", 1),
    ]
