"""OpenAI's wire shapes (ray_gitops.llm.openai_wire), token metrics (token_stats), the n-gram
model's sampling, vLLM's argument mapping and the [llm] table's rule against GPUs: values only."""

from __future__ import annotations

import base64
import random
import struct

import pytest

from ray_gitops.llm.engine import SamplingParams, Usage
from ray_gitops.llm.ngram import NgramModel, detokenize, tokenize
from ray_gitops.llm.openai_wire import OpenAIError, embedding_list, read_chat, read_completion, read_embeddings, sse
from ray_gitops.llm.token_stats import TokenStats
from ray_gitops.llm.vllm_engine import engine_kwargs, sampling_kwargs
from vocabulary.spec.llm import LLMConfig, llm_problem
from vocabulary.spec.placement import PlacementConfig

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"model": None}, "model"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_completion_tokens": "9"}, "max_completion_tokens"),
        ({"top_p": 0}, "top_p"),
        ({"n": 2}, "n"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"stream": "yes"}, "stream"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
    ],
)
def test_a_bad_chat_request_names_the_param_at_fault(change: dict, param: str) -> None:
    with pytest.raises(OpenAIError) as refused:
        read_chat({**CHAT, **change})
    assert refused.value.status == 400 and refused.value.param == param
    assert refused.value.body()["error"]["type"] == "invalid_request_error"


def test_a_chat_request_reads_text_parts_and_the_sampling_it_asks() -> None:
    request = read_chat({**CHAT, "messages": [{"role": "system", "content": [{"type": "text", "text": "a"},
                                                                            {"type": "text", "text": "b"}]}],
                         "max_tokens": 7, "temperature": 0, "stop": "x", "stream": True,
                         "stream_options": {"include_usage": True}, "user": "ignored"})
    assert request.messages == ({"role": "system", "content": "ab"},)
    assert (request.max_tokens, request.temperature, request.stop, request.include_usage) == (7, 0.0, ("x",), True)
    assert read_completion({"model": "m", "prompt": ["one"]}).prompt == "one"
    with pytest.raises(OpenAIError):
        read_completion({"model": "m", "prompt": "x", "echo": True})
    assert read_embeddings({"model": "m", "input": "a"}).inputs == ("a",)


def test_sse_and_base64_embeddings_are_what_clients_decode() -> None:
    assert sse({"a": 1}) == b'data: {"a":1}\n\n'
    encoded = embedding_list("m", [(0.5, -1.0)], 2, "base64")["data"][0]["embedding"]
    assert struct.unpack("<2f", base64.b64decode(encoded)) == (0.5, -1.0)


def test_token_metrics_are_time_to_first_token_gaps_per_token_and_decode_speed() -> None:
    now = [0.0]
    stats = TokenStats(lambda: now[0])
    timing = stats.start("m")
    now[0] = 0.5
    timing.token(1)  # first token after 0.5 s
    now[0] = 0.7
    timing.token(2)  # two tokens in 0.2 s: 0.1 s each
    timing.done(Usage(prompt_tokens=4, completion_tokens=3))
    timing.cancelled()  # after done: nothing
    snap = stats.snapshot()["models"]["m"]
    assert snap["ttft_s"] == {"count": 1, "mean": 0.5, "max": 0.5}
    assert snap["inter_token_s"]["count"] == 2 and snap["inter_token_s"]["mean"] == pytest.approx(0.1)
    assert snap["tokens_per_s"] == pytest.approx(2 / 0.2)
    assert (snap["requests"], snap["cancelled"], snap["running"], snap["prompt_tokens"]) == (1, 0, 0, 4)
    stats.start("m").cancelled()
    assert stats.snapshot()["models"]["m"]["cancelled"] == 1


def test_the_ngram_model_samples_what_followed_its_context() -> None:
    model = NgramModel("a b c . a b d . a b c .", order=3)
    assert model.sample(["a", "b"], 0.0, 1.0, random.Random(0)) == "c"  # greedy: c twice, d once
    assert {model.sample(["a", "b"], 1.0, 1.0, random.Random(s)) for s in range(50)} == {"c", "d"}
    assert {model.sample(["a", "b"], 1.0, 0.5, random.Random(s)) for s in range(50)} == {"c"}  # top_p cuts d
    assert model.sample(["zebra"], 0.0, 1.0, random.Random(0)) == "."  # unknown context: the unigram's best
    assert tokenize("Hello, world's (end).") == ["Hello", ",", "world's", "(", "end", ")", "."]
    assert "".join(detokenize(p, t) for p, t in [(None, "Hello"), ("Hello", ","), (",", "world")]) == "Hello, world"


def test_vllm_gets_the_table_as_its_own_arguments() -> None:
    assert engine_kwargs("/cache/m", "llama", 2, 4096, {"dtype": "bfloat16"}) == {
        "model": "/cache/m", "served_model_name": ["llama"], "tensor_parallel_size": 2, "max_model_len": 4096,
        "dtype": "bfloat16", "distributed_executor_backend": "ray",
    }
    assert "distributed_executor_backend" not in engine_kwargs("/m", "m", 1, None, {})
    assert sampling_kwargs(SamplingParams(max_tokens=5, temperature=0.0, stop=("x",))) == {
        "n": 1, "max_tokens": 5, "temperature": 0.0, "top_p": 1.0, "seed": None, "stop": ["x"],
    }


def test_tensor_parallel_size_must_match_the_gpus_of_the_placement() -> None:
    vllm = LLMConfig(engine="vllm", model="m", tensor_parallel_size=2)
    two = PlacementConfig(bundles=({"CPU": 1}, {"GPU": 1}, {"GPU": 1}), strategy="STRICT_PACK")
    assert llm_problem(vllm, ["m"], two, {}) is None
    assert "num_gpus must be 0" in (llm_problem(vllm, ["m"], two, {"num_gpus": 1}) or "")
    assert "hold 1 GPUs" in (llm_problem(vllm, ["m"], PlacementConfig(bundles=({"GPU": 1},)), {}) or "")
    assert llm_problem(LLMConfig(engine="vllm", model="m"), ["m"], None, {"num_gpus": 1}) is None
    assert "required" in (llm_problem(LLMConfig(engine="vllm"), [], None, {"num_gpus": 1}) or "")
    assert llm_problem(LLMConfig(engine="ngram"), [], None, {}) is None
