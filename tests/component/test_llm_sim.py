"""The LLM simulator: OpenAI-shaped answers, SSE streams, and a prefix cache that makes a cached prompt fast."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest
from starlette.requests import Request

from deployments.apps.llm_sim import BLOCK_TOKENS, LLMSim, PrefixCache, block_hashes, prompt_tokens
from ray_gitops.registry import REPORTED_LOAD


@pytest.fixture(autouse=True)
def no_reported_load_left_behind() -> Any:
    """The simulator reports its load when a replica context is installed (another
    test may have left one): the process-wide value must not reach later tests."""
    yield
    REPORTED_LOAD.value = None


def call(sim: LLMSim, body: Any, path: str = "/v1/chat/completions") -> httpx.Response:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        response = await sim(Request(scope, receive))
        await response(scope, receive, send)

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as client:
            content = body if isinstance(body, bytes) else json.dumps(body).encode()
            return await client.post(path, content=content)

    return asyncio.run(go())


def conversation(turns: int, words: int = 40) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": "you are a simulator " * 10}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"question {turn} " + "word " * words})
        messages.append({"role": "assistant", "content": "answer " * 10})
    return messages[:-1]


def test_a_completion_is_openai_shaped_and_counts_its_cached_tokens() -> None:
    sim = LLMSim(prefill_s_per_token=0, decode_s_per_token=0)
    first = call(sim, {"model": "sim", "messages": conversation(1), "max_tokens": 3}).json()
    assert first["object"] == "chat.completion" and first["choices"][0]["message"]["content"] == "tok0 tok1 tok2"
    assert first["usage"]["completion_tokens"] == 3
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    second = call(sim, {"model": "sim", "messages": conversation(2), "max_tokens": 3}).json()
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    # The first turn's whole blocks are cached; the second turn extends them.
    assert cached == len(prompt_tokens(conversation(1))) // BLOCK_TOKENS * BLOCK_TOKENS and cached > 0


def test_prefill_time_is_proportional_to_the_tokens_not_cached() -> None:
    sim = LLMSim(prefill_s_per_token=0.002, decode_s_per_token=0)
    body = {"messages": conversation(3), "max_tokens": 1}
    started = time.perf_counter()
    call(sim, body)
    cold = time.perf_counter() - started
    started = time.perf_counter()
    call(sim, body)
    warm = time.perf_counter() - started
    assert cold >= len(prompt_tokens(conversation(3))) * 0.002 * 0.9
    assert warm < cold / 3


def test_a_stream_is_server_sent_chunks_then_done() -> None:
    sim = LLMSim(prefill_s_per_token=0, decode_s_per_token=0.001)
    answer = call(sim, {"messages": conversation(1), "max_tokens": 4, "stream": True})
    assert answer.headers["content-type"].startswith("text/event-stream")
    events = [line[len("data: "):] for line in answer.text.split("\n\n") if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert "".join(c["choices"][0]["delta"]["content"] for c in chunks) == "tok0 tok1 tok2 tok3"
    assert chunks[-1]["choices"][0]["finish_reason"] == "length" and chunks[-1]["usage"]["completion_tokens"] == 4


@pytest.mark.parametrize("body", [b"not json", b'{"model": "sim"}', b'{"messages": "hi"}'])
def test_a_bad_request_is_400_in_openai_s_error_shape(body: bytes) -> None:
    answer = call(LLMSim(), body)
    assert answer.status_code == 400 and answer.json()["error"]["type"] == "invalid_request_error"


def test_the_cache_is_bounded_and_evicts_the_least_recently_used() -> None:
    cache = PrefixCache(capacity_tokens=BLOCK_TOKENS * 4)
    old = block_hashes([f"a{n}" for n in range(BLOCK_TOKENS * 3)])
    new = block_hashes([f"b{n}" for n in range(BLOCK_TOKENS * 3)])
    cache.add(old)
    cache.add(new)
    assert cache.cached_tokens(new) == BLOCK_TOKENS * 3 and cache.cached_tokens(old) == 0
    assert cache.use() == 1.0


def test_settings_change_in_place_and_unknown_ones_are_refused() -> None:
    sim = LLMSim()
    sim.reconfigure({"decode_s_per_token": 0.02})
    assert sim.settings["decode_s_per_token"] == 0.02
    with pytest.raises(ValueError, match="unknown settings"):
        sim.reconfigure({"speed": 1})
