"""The OpenAI HTTP layer: an ASGI app over any `Engine`, engine-agnostic.

Owns the routes (matched by the path's end, so the endpoint's route may be
`/v1` or anything else): `POST .../chat/completions`, `POST .../completions`,
`GET .../models` and `GET .../models/{id}`, `POST .../embeddings` when the
engine is an `Embedder`, and `GET .../stats` (the token metrics per model,
`ray_gitops.llm.token_stats`). Request checking and every shape on the wire
are `ray_gitops.llm.openai_wire`'s; this module turns an engine's deltas into
one JSON answer or an SSE stream (`data: {chunk}` ..., then `data: [DONE]`),
and every failure into OpenAI's error shape with its status (a model it does
not serve: 404 `model_not_found`; an engine's refusal: 400 with its code).

LoRA adapters (`ray_gitops.llm.adapters`): a request whose `model` names one
is generated with it, loaded first if it is not (the engine keeps running);
/v1/models lists them after the base model, each with its `parent`. Every
answer of such an app ends its headers with the multiplexing report
(`vocabulary.request_path.wire.MODELS_HEADER`: the adapters loaded now, and
what this request loaded or unloaded), which the proxy takes off and routes
the adapters' requests by. `GET .../stats` also says the engine's process
and starts (`about`) and the adapters loaded, loads and evictions.

Cancellation: when the client goes away the replica cancels the app's task
(ASGI 2.4, `replica.calling.asgi`); the engine's iterator is then closed
(`aclose()`), which stops the request in the engine. `on_load` is told the
requests running after each start and end (the replica reports it to the
proxy: `ray_gitops.serving.report_load`).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Any, AsyncGenerator, Callable, Mapping

from ray_gitops.asgi import Receive, Scope, Send, no_lifespan, whole_body
from ray_gitops.llm.adapters import Adapters
from ray_gitops.llm.engine import Delta, Embedder, Engine, EngineRefused, Prompt, SamplingParams, Usage
from ray_gitops.llm.openai_wire import (
    SSE_DONE,
    ChatRequest,
    CompletionRequest,
    OpenAIError,
    chat_chunk,
    chat_completion,
    completion,
    completion_chunk,
    embedding_list,
    model_card,
    model_list,
    read_chat,
    read_completion,
    read_embeddings,
    sse,
    usage_chunk,
    usage_dict,
)
from ray_gitops.llm.token_stats import Timing, TokenStats
from vocabulary.request_path.multiplexing import RequestModels, report
from vocabulary.request_path.wire import MODELS_HEADER

__all__ = ["OpenAIApp", "DEFAULT_MAX_TOKENS"]

# Output tokens when a request names no max_tokens.
DEFAULT_MAX_TOKENS = 256
_JSON = [(b"content-type", b"application/json")]
_SSE = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


class OpenAIApp:
    """OpenAI's API over `engine`, as an ASGI app."""

    def __init__(
        self,
        engine: Engine,
        *,
        clock: Callable[[], float] = time.perf_counter,
        wall: Callable[[], float] = time.time,
        on_load: Callable[[int], None] | None = None,
        default_max_tokens: int = DEFAULT_MAX_TOKENS,
        adapters: Adapters | None = None,
        about: Callable[[], Mapping[str, Any]] | None = None,
    ) -> None:
        """`adapters`: the LoRA adapters it serves over `engine` (None: none); `about`: what
        /stats says of the engine (`engine`), beside its process id."""
        self.engine = engine
        self.adapters = adapters
        self._about = about
        self.stats = TokenStats(clock)
        self._wall = wall
        self._on_load = on_load
        self._default_max_tokens = default_max_tokens
        self._created = int(wall())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await no_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        record = None
        if self.adapters is not None:
            record = RequestModels(None)
            send = _reporting(send, self.adapters, record)
        try:
            await self._route(scope, receive, send, record)
        except OpenAIError as error:
            await _json(send, error.status, error.body())

    async def _route(self, scope: Scope, receive: Receive, send: Send, record: RequestModels | None) -> None:
        path, method = scope["path"].rstrip("/"), scope["method"]
        posts = {"/chat/completions": self._chat, "/completions": self._completion}
        for suffix, handler in posts.items():
            if path.endswith(suffix):
                _allow(method, "POST")
                await handler(await _body(receive), send, record)
                return
        if path.endswith("/embeddings"):
            _allow(method, "POST")
            await self._embeddings(await _body(receive), send)
            return
        if path.endswith("/stats"):
            _allow(method, "GET")
            await _json(send, 200, self._stats())
            return
        _, sep, name = path.partition("/models/")
        if path.endswith("/models") or sep:
            _allow(method, "GET")
            if not sep:
                await _json(send, 200, model_list(self._names(), self._created, self._parents()))
                return
            self._served(name)
            await _json(send, 200, model_card(name, self._created, parent=self._parents().get(name)))
            return
        raise OpenAIError(404, f"Unknown path {scope['path']}: this backend serves /v1/chat/completions, "
                          "/v1/completions, /v1/models and /v1/embeddings", "invalid_request_error", None, "not_found")

    def _names(self) -> list[str]:
        """Every model clients may name: the engine's, then the adapters."""
        return [*self.engine.models(), *(self.adapters.names() if self.adapters is not None else ())]

    def _parents(self) -> dict[str, str]:
        """Each adapter's base model (what /v1/models says is its `parent`)."""
        if self.adapters is None:
            return {}
        base = self.engine.models()[0]
        return {name: base for name in self.adapters.names()}

    def _served(self, model: str) -> None:
        if model not in self.engine.models() and (self.adapters is None or model not in self.adapters):
            raise OpenAIError(404, f"The model `{model}` does not exist (served: {', '.join(self._names())}).",
                              "invalid_request_error", "model", "model_not_found")

    def _stats(self) -> dict[str, Any]:
        snapshot = self.stats.snapshot()
        snapshot["engine"] = {"pid": os.getpid(), **(self._about() if self._about is not None else {})}
        if self.adapters is not None:
            snapshot["adapters"] = {"served": self.adapters.names(), "loaded": self.adapters.loaded(),
                                    **self.adapters.counts()}
        return snapshot

    async def _adapter(self, model: str, record: RequestModels | None) -> str | None:
        """The adapter `model` names, loaded now; None for the base model."""
        if self.adapters is None or model not in self.adapters:
            return None
        try:
            await self.adapters.ensure(model, record)
        except Exception as error:  # noqa: BLE001 — a file the engine cannot read: the server's fault, said whole
            raise OpenAIError(500, f"the adapter `{model}` could not be loaded: {error}", "server_error", "model",
                              "adapter_load_failed") from None
        return model

    async def _chat(self, body: Any, send: Send, record: RequestModels | None = None) -> None:
        request = read_chat(body)
        self._served(request.model)
        adapter = await self._adapter(request.model, record)
        await self._generate(request, Prompt(messages=request.messages), send, adapter)

    async def _completion(self, body: Any, send: Send, record: RequestModels | None = None) -> None:
        request = read_completion(body)
        self._served(request.model)
        adapter = await self._adapter(request.model, record)
        await self._generate(request, Prompt(text=request.prompt), send, adapter)

    async def _embeddings(self, body: Any, send: Send) -> None:
        request = read_embeddings(body)
        self._served(request.model)
        if self.adapters is not None and request.model in self.adapters:
            raise OpenAIError(400, f"The model `{request.model}` is a LoRA adapter: embed with its base model "
                              f"`{self.engine.models()[0]}`.", "invalid_request_error", "model", "embeddings_unsupported")
        if not isinstance(self.engine, Embedder):
            raise OpenAIError(400, f"The model `{request.model}` does not support embeddings.",
                              "invalid_request_error", "model", "embeddings_unsupported")
        try:
            embedded = await self.engine.embed(request.inputs)
        except EngineRefused as refused:
            raise OpenAIError(400, str(refused), "invalid_request_error", refused.param, refused.code) from None
        await _json(send, 200, embedding_list(request.model, embedded.vectors, embedded.prompt_tokens,
                                              request.encoding_format))

    async def _generate(
        self, request: ChatRequest | CompletionRequest, prompt: Prompt, send: Send, adapter: str | None = None
    ) -> None:
        chat = isinstance(request, ChatRequest)
        ident = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        params = SamplingParams(
            max_tokens=request.max_tokens or self._default_max_tokens, temperature=request.temperature,
            top_p=request.top_p, seed=request.seed, stop=request.stop,
        )
        timing = self.stats.start(request.model)
        self._report()
        if adapter is None or self.adapters is None:
            deltas = self.engine.generate(prompt, params, ident)
        else:
            deltas = self.adapters.engine.generate(prompt, params, ident, adapter=adapter)
        try:
            try:
                first = await _first(deltas)
            except OpenAIError:
                timing.refused()
                raise
            timing.token(first.tokens)
            answer = _Answer(ident, int(self._wall()), request.model, chat)
            if request.stream:
                usage = await self._stream(answer, first, deltas, timing, request.include_usage, send)
            else:
                usage = await self._whole(answer, first, deltas, timing, send)
            if usage is not None:
                timing.done(usage)
        finally:
            timing.cancelled()  # nothing if done: a request that did not finish was cancelled or failed
            await deltas.aclose()  # the client went away (CancelledError), or it ended: the engine stops it
            self._report()

    async def _whole(
        self, answer: _Answer, first: Delta, deltas: AsyncGenerator[Delta, None], timing: Timing, send: Send
    ) -> Usage:
        texts, last = [first.text], first
        if last.finish_reason is None:
            async for delta in deltas:
                timing.token(delta.tokens)
                texts.append(delta.text)
                last = delta
        usage = _final_usage(last)
        await _json(send, 200, answer.whole("".join(texts), last.finish_reason or "stop", usage))
        return usage

    async def _stream(
        self, answer: _Answer, first: Delta, deltas: AsyncGenerator[Delta, None], timing: Timing, include_usage: bool, send: Send
    ) -> Usage | None:
        await send({"type": "http.response.start", "status": 200, "headers": _SSE})
        if answer.chat:
            await _chunk(send, answer.chunk({"role": "assistant", "content": ""}))
        delta: Delta | None = first
        last = first
        while delta is not None:
            last = delta
            if delta.text:
                await _chunk(send, answer.chunk({"content": delta.text} if answer.chat else delta.text))
            if delta.finish_reason is not None:
                break
            try:
                delta = await deltas.__anext__()
            except StopAsyncIteration:
                delta = None
            except Exception as error:  # noqa: BLE001 — the stream has started: the error goes in it, as OpenAI's does
                failure = OpenAIError(500, f"the engine failed: {error}", "server_error", None, "engine_error")
                await _chunk(send, failure.body(), final=True)
                return None
            if delta is not None:
                timing.token(delta.tokens)
        usage = _final_usage(last)
        await _chunk(send, answer.chunk({} if answer.chat else "", last.finish_reason or "stop"))
        if include_usage:
            await _chunk(send, usage_chunk(answer.ident, answer.created, answer.model, answer.kind(chunk=True),
                                           usage_dict(usage.prompt_tokens, usage.completion_tokens)))
        await send({"type": "http.response.body", "body": SSE_DONE, "more_body": False})
        return usage

    def _report(self) -> None:
        if self._on_load is not None:
            self._on_load(self.stats.running())


class _Answer:
    """One request's id, time and model, and its answer's shapes (chat or completion)."""

    def __init__(self, ident: str, created: int, model: str, chat: bool) -> None:
        self.ident, self.created, self.model, self.chat = ident, created, model, chat

    def kind(self, chunk: bool) -> str:
        if not self.chat:
            return "text_completion"
        return "chat.completion.chunk" if chunk else "chat.completion"

    def whole(self, text: str, finish_reason: str, usage: Usage) -> dict[str, Any]:
        counts = usage_dict(usage.prompt_tokens, usage.completion_tokens)
        build = chat_completion if self.chat else completion
        return build(self.ident, self.created, self.model, text, finish_reason, counts)

    def chunk(self, content: Any, finish_reason: str | None = None) -> dict[str, Any]:
        if self.chat:
            return chat_chunk(self.ident, self.created, self.model, content, finish_reason)
        return completion_chunk(self.ident, self.created, self.model, content, finish_reason)


def _reporting(send: Send, adapters: Adapters, record: RequestModels) -> Send:
    """`send` that ends an answer's headers with the adapters' report to the proxy."""

    async def sending(message: Any) -> None:
        if message.get("type") == "http.response.start":
            headers = [*message.get("headers", ()), (MODELS_HEADER, report(adapters.loaded(), record))]
            message = {**message, "headers": headers}
        await send(message)

    return sending


async def _first(deltas: AsyncGenerator[Delta, None]) -> Delta:
    """The engine's first delta: a refusal is the client's 400, nothing at all the engine's fault."""
    try:
        return await deltas.__anext__()
    except EngineRefused as refused:
        raise OpenAIError(400, str(refused), "invalid_request_error", refused.param, refused.code) from None
    except StopAsyncIteration:
        raise OpenAIError(500, "the engine ended the request without an answer", "server_error", None, "engine_error") from None


def _final_usage(last: Delta) -> Usage:
    if last.usage is None:
        raise OpenAIError(500, "the engine ended the request without its usage", "server_error", None, "engine_error")
    return last.usage


def _allow(method: str, allowed: str) -> None:
    if method != allowed:
        raise OpenAIError(405, f"Method {method} not allowed here (use {allowed})", "invalid_request_error", None,
                          "method_not_allowed")


async def _body(receive: Receive) -> Any:
    body = await whole_body(receive)
    if body is None:
        raise OpenAIError(400, "the client went away", "invalid_request_error")
    try:
        return json.loads(body)
    except ValueError as error:
        raise OpenAIError(400, f"We could not parse the JSON body of your request: {error}",
                          "invalid_request_error", None, "invalid_json") from None


async def _json(send: Send, status: int, body: Any) -> None:
    await send({"type": "http.response.start", "status": status, "headers": _JSON})
    await send({"type": "http.response.body", "body": json.dumps(body, separators=(",", ":")).encode()})


async def _chunk(send: Send, obj: Any, final: bool = False) -> None:
    await send({"type": "http.response.body", "body": sse(obj), "more_body": not final})
