"""An engine-free LLM: OpenAI's `/v1/chat/completions` with a simulated prefix (KV) cache.

It answers like an inference server (vLLM, SGLang) without a model or a GPU,
so the routing policies (docs/guides/llm.md), the tests and `bench/routing.py` can
show what an LLM's replica placement costs:

- the prompt is the request's `messages`, cut into tokens (whitespace-
  separated words of "role: content" lines); tokens are cached in blocks of
  `BLOCK_TOKENS`, as vLLM's paged KV cache does, and a block is a hit only
  when every block before it is too (a prefix);
- prefill takes `prefill_s_per_token` for each prompt token NOT in this
  replica's cache, then each output token takes `decode_s_per_token`;
- the cache holds `cache_tokens` tokens, the least recently used blocks
  evicted first; the prompt's blocks are cached once its prefill is done;
- one request at a time prefills (the engine's compute is one queue), while
  decodes overlap, as continuous batching does;
- it reports the sequences it holds (prefilling or decoding: the engine's
  queue depth) to the proxy (`ray_gitops.serving.report_load`), so
  `least_loaded` and `[autoscaling] target_reported_load` can use it.

The OpenAI shapes (answers, chunks, SSE, the error shape) are
`ray_gitops.llm.openai_wire`'s, which the built-in OpenAI backend serves too.
`"stream": true` answers server-sent events (`chat.completion.chunk`s, one
per token, then `data: [DONE]`); otherwise one `chat.completion`. `usage`
says how many prompt tokens came from the cache
(`prompt_tokens_details.cached_tokens`). `GET .../stats` answers the cache's
hits and misses. Settings come from `user_config` (changed in place):
`prefill_s_per_token`, `decode_s_per_token`, `cache_tokens`,
`max_tokens` (output tokens when the request says none). `complete(body)`
answers an already parsed body: `bench.routing_apps` serves the same
simulator from Ray Serve with it.

    curl -s localhost:8000/v1/chat/completions -d '{"model": "sim", "max_tokens": 4,
         "messages": [{"role": "user", "content": "hello there"}]}'
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import json
import time
import uuid
from typing import Any, AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ray_gitops.llm.openai_wire import SSE_DONE, OpenAIError, chat_chunk, chat_completion, sse

BLOCK_TOKENS = 16
DEFAULTS: dict[str, float] = {
    "prefill_s_per_token": 0.0005,
    "decode_s_per_token": 0.005,
    "cache_tokens": 65_536,
    "max_tokens": 16,
}


def prompt_tokens(messages: list[dict[str, Any]]) -> list[str]:
    """The prompt as tokens: each message's "role: content", word by word."""
    tokens: list[str] = []
    for message in messages:
        tokens.append(f"{message.get('role', 'user')}:")
        tokens.extend(str(message.get("content", "")).split())
    return tokens


def block_hashes(tokens: list[str]) -> list[bytes]:
    """The chained hash of each full block of tokens (a block's hash covers the whole prefix up to it)."""
    hashes: list[bytes] = []
    running = hashlib.blake2b(digest_size=16)
    for end in range(BLOCK_TOKENS, len(tokens) + 1, BLOCK_TOKENS):
        running.update("\0".join(tokens[end - BLOCK_TOKENS : end]).encode() + b"\1")
        hashes.append(running.copy().digest())
    return hashes


class PrefixCache:
    """A replica's cached prompt blocks, least recently used first."""

    def __init__(self, capacity_tokens: int) -> None:
        self.capacity_blocks = max(1, capacity_tokens // BLOCK_TOKENS)
        self._blocks: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self.hits = 0
        self.misses = 0

    def cached_tokens(self, hashes: list[bytes]) -> int:
        """Tokens of the prompt's longest cached prefix (whole blocks)."""
        cached = 0
        for block in hashes:
            if block not in self._blocks:
                break
            self._blocks.move_to_end(block)
            cached += 1
        return cached * BLOCK_TOKENS

    def add(self, hashes: list[bytes]) -> None:
        for block in hashes:
            self._blocks[block] = None
            self._blocks.move_to_end(block)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)

    def use(self) -> float:
        """The share of the cache in use, 0 to 1."""
        return len(self._blocks) / self.capacity_blocks


class LLMSim:
    def __init__(self, **settings: float) -> None:
        self.settings = {**DEFAULTS, **settings}
        self.cache = PrefixCache(int(self.settings["cache_tokens"]))
        self._compute = asyncio.Lock()
        self.sequences = 0  # requests being prefilled or decoded

    def reconfigure(self, user_config: dict[str, float] | None) -> None:
        unknown = set(user_config or {}) - set(DEFAULTS)
        if unknown:
            raise ValueError(f"llm_sim: unknown settings {sorted(unknown)} (known: {sorted(DEFAULTS)})")
        self.settings = {**DEFAULTS, **(user_config or {})}
        if int(self.settings["cache_tokens"]) // BLOCK_TOKENS != self.cache.capacity_blocks:
            self.cache = PrefixCache(int(self.settings["cache_tokens"]))

    async def __call__(self, request: Request) -> Response:
        if request.url.path.endswith("/stats"):
            return JSONResponse({"hits": self.cache.hits, "misses": self.cache.misses, "use": self.cache.use()})
        try:
            body = json.loads(await request.body())
        except ValueError as error:
            return _bad_request(error)
        return await self.complete(body)

    async def complete(self, body: Any) -> Response:
        """The answer to one parsed request body (what `__call__` serves; a Ray Serve
        deployment wrapping the simulator calls it with the body it parsed)."""
        try:
            if not isinstance(body, dict):
                raise TypeError("the body must be a JSON object")
            messages = body["messages"]
            if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
                raise ValueError("messages must be a list of objects")
            max_tokens = int(body.get("max_tokens") or self.settings["max_tokens"])
        except (ValueError, KeyError, TypeError) as error:
            return _bad_request(error)
        tokens = prompt_tokens(messages)
        hashes = block_hashes(tokens)
        self.sequences += 1
        _report(self.sequences)
        try:
            async with self._compute:  # prefill: one prompt at a time
                cached = self.cache.cached_tokens(hashes)
                self.cache.hits += cached
                self.cache.misses += len(tokens) - cached
                await asyncio.sleep((len(tokens) - cached) * self.settings["prefill_s_per_token"])
                self.cache.add(hashes)
        except BaseException:
            self.sequences -= 1
            raise
        usage = {
            "prompt_tokens": len(tokens),
            "completion_tokens": max_tokens,
            "total_tokens": len(tokens) + max_tokens,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        model = str(body.get("model", "sim"))
        if body.get("stream"):
            return StreamingResponse(self._events(model, max_tokens, usage), media_type="text/event-stream")
        try:
            await asyncio.sleep(max_tokens * self.settings["decode_s_per_token"])
        finally:
            self.sequences -= 1
        return JSONResponse(chat_completion(
            f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), model, " ".join(_words(max_tokens)), "length", usage
        ))

    async def _events(self, model: str, max_tokens: int, usage: dict[str, Any]) -> AsyncIterator[bytes]:
        ident, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        try:
            for n, word in enumerate(_words(max_tokens)):
                await asyncio.sleep(self.settings["decode_s_per_token"])
                last = n == max_tokens - 1
                yield sse(chat_chunk(
                    ident, created, model, {"content": word if n == 0 else " " + word},
                    "length" if last else None, usage if last else None,
                ))
        finally:
            self.sequences -= 1
        yield SSE_DONE


def _bad_request(error: Exception) -> Response:
    return JSONResponse(OpenAIError(400, f"bad request: {error}").body(), 400)


def _words(count: int) -> list[str]:
    return [f"tok{n}" for n in range(count)]


def _report(load: float) -> None:
    """Tell the proxy the load, when running as a replica (not in a unit test)."""
    try:
        from ray_gitops import serving

        serving.report_load(load)
    except RuntimeError:
        pass
