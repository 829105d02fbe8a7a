"""The OpenAI layer (ray_gitops.llm.http) over the CPU engine, in-process: the official
`openai` client's chat, streaming, completions, models and embeddings; OpenAI's error
shape for what it refuses; and a client that goes away mid-stream stopping the engine."""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncGenerator, Sequence

import httpx
import openai
import pytest

from ray_gitops.llm.engine import Delta, Prompt, SamplingParams, Usage
from ray_gitops.llm.http import OpenAIApp
from ray_gitops.llm.ngram import NgramEngine

TEXT = "the cat sat on the mat . the dog sat on the log . " * 20


def client(app: OpenAIApp) -> openai.AsyncOpenAI:
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")
    return openai.AsyncOpenAI(base_url="http://test/v1", api_key="unused", http_client=http, max_retries=0)


def test_the_official_client_chats_streams_completes_and_lists_models() -> None:
    app = OpenAIApp(NgramEngine(TEXT, "tiny"))

    async def run() -> None:
        api = client(app)
        models = await api.models.list()
        assert [m.id for m in models.data] == ["tiny"] and models.data[0].object == "model"
        assert (await api.models.retrieve("tiny")).id == "tiny"

        chat = await api.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "the cat"}], max_tokens=5, temperature=0
        )
        assert chat.object == "chat.completion" and chat.choices[0].message.role == "assistant"
        assert chat.choices[0].finish_reason == "length"
        assert chat.usage is not None and chat.usage.completion_tokens == 5
        assert chat.usage.prompt_tokens == 6  # user : the cat assistant :
        assert chat.usage.total_tokens == 11

        stream = await api.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "the cat"}], max_tokens=5, temperature=0,
            stream=True, stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
        assert chunks[0].choices[0].delta.role == "assistant"
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == chat.choices[0].message.content  # greedy: the same tokens, streamed
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
        assert chunks[-1].choices == [] and chunks[-1].usage is not None
        assert chunks[-1].usage.completion_tokens == 5

        done = await api.completions.create(model="tiny", prompt="the dog", max_tokens=3, temperature=0)
        assert done.object == "text_completion" and done.usage is not None
        assert done.usage.prompt_tokens == 2 and done.usage.completion_tokens == 3
        assert done.choices[0].text.split() == ["sat", "on", "the"]

        streamed = await api.completions.create(model="tiny", prompt="the dog", max_tokens=3, temperature=0, stream=True)
        assert "".join([c.choices[0].text async for c in streamed]) == done.choices[0].text

        stopped = await api.completions.create(model="tiny", prompt="the dog", max_tokens=9, temperature=0, stop=["the"])
        assert stopped.choices[0].finish_reason == "stop" and stopped.choices[0].text == " sat on "

        vectors = await api.embeddings.create(model="tiny", input=["the cat", "the dog"])  # base64 on the wire
        assert len(vectors.data) == 2 and len(vectors.data[0].embedding) == 64
        assert abs(sum(v * v for v in vectors.data[0].embedding) - 1) < 1e-5
        floats = await api.embeddings.create(model="tiny", input="the cat", encoding_format="float")
        assert floats.data[0].embedding == pytest.approx(vectors.data[0].embedding, abs=1e-6)

    asyncio.run(run())
    stats = app.stats.snapshot()["models"]["tiny"]
    # the stopped one generated 3 tokens, the third holding the stop string (left out of its text)
    assert stats["requests"] == 5 and stats["completion_tokens"] == 5 + 5 + 3 + 3 + 3
    assert stats["ttft_s"]["count"] == 5 and stats["running"] == 0 and stats["tokens_per_s"] > 0


def test_what_it_refuses_is_answered_in_openai_s_error_shape() -> None:
    app = OpenAIApp(NgramEngine(TEXT, "tiny", max_model_len=32))

    async def run() -> None:
        api = client(app)
        with pytest.raises(openai.NotFoundError) as missing:
            await api.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "hi"}])
        assert missing.value.body == {"message": "The model `gpt-4` does not exist (served: tiny).",
                                      "type": "invalid_request_error", "param": "model", "code": "model_not_found"}
        with pytest.raises(openai.BadRequestError) as too_long:
            await api.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "cat " * 40}])
        assert too_long.value.code == "context_length_exceeded" and too_long.value.param == "messages"
        with pytest.raises(openai.BadRequestError) as hot:
            await api.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}], temperature=3)
        assert hot.value.param == "temperature" and "at most 2" in hot.value.message
        with pytest.raises(openai.BadRequestError) as role:
            await api.chat.completions.create(model="tiny", messages=[{"role": "wizard", "content": "x"}])  # type: ignore[misc,list-item]
        assert role.value.param == "messages[0].role"

    asyncio.run(run())

    async def raw(method: str, path: str, body: bytes = b"") -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
            return await http.request(method, path, content=body)

    broken = asyncio.run(raw("POST", "/v1/chat/completions", b"{not json"))
    assert broken.status_code == 400 and set(broken.json()["error"]) == {"message", "type", "param", "code"}
    assert broken.json()["error"]["code"] == "invalid_json"
    assert asyncio.run(raw("GET", "/v1/chat/completions")).status_code == 405
    assert asyncio.run(raw("GET", "/v1/nothing")).json()["error"]["code"] == "not_found"


class SlowEngine:
    """An engine whose requests run until closed; it records what was closed early."""

    def __init__(self) -> None:
        self.closed: list[str] = []
        self.tokens = 0

    def models(self) -> Sequence[str]:
        return ["slow"]

    async def generate(self, prompt: Prompt, params: SamplingParams, request_id: str) -> AsyncGenerator[Delta, None]:
        try:
            for n in range(params.max_tokens):
                self.tokens += 1
                last = n == params.max_tokens - 1
                yield Delta(f" t{n}", 1, "length" if last else None, Usage(1, n + 1) if last else None)
                await asyncio.sleep(0.01)
        finally:
            if self.tokens < params.max_tokens:
                self.closed.append(request_id)


def test_a_client_that_goes_away_mid_stream_stops_the_request_in_the_engine() -> None:
    engine = SlowEngine()
    loads: list[int] = []
    app = OpenAIApp(engine, on_load=loads.append)
    body = json.dumps({"model": "slow", "stream": True, "max_tokens": 10_000,
                       "messages": [{"role": "user", "content": "go"}]}).encode()

    async def run() -> list[bytes]:
        sent: list[bytes] = []
        three = asyncio.Event()

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body":
                sent.append(message["body"])
                if len(sent) == 3:
                    three.set()

        scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}
        task = asyncio.create_task(app(scope, receive, send))
        await three.wait()
        task.cancel()  # what the replica does when the client disconnects (ASGI 2.4)
        with pytest.raises(asyncio.CancelledError):
            await task
        return sent

    sent = asyncio.run(run())
    assert sent[0].startswith(b"data: ") and b'"role":"assistant"' in sent[0]
    assert len(engine.closed) == 1 and engine.closed[0].startswith("chatcmpl-")
    assert engine.tokens < 100  # it stopped generating, not ran to max_tokens
    stats = app.stats.snapshot()["models"]["slow"]
    assert stats["cancelled"] == 1 and stats["running"] == 0 and stats["requests"] == 0
    assert loads == [1, 0]
