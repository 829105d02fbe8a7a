"""The engine interface the OpenAI layer speaks: what an engine adapter implements.

An engine generates from a `Prompt` (a text, or chat messages it renders with
its own chat template) under `SamplingParams`, as an async iterator of
`Delta`s: text as it is produced, the last one carrying `finish_reason` and
the request's `Usage` (tokens as the engine counts them). Closing the
iterator early (`aclose()`: the client went away) must stop the request in
the engine. An engine that can embed offers `embed`. A request the engine
refuses before generating (a prompt longer than its context) raises
`EngineRefused` from the iterator's first step, before any text.

An engine that serves LoRA adapters is an `AdapterEngine`: it loads one by
name from a local path (`load_adapter`) and unloads it (`unload_adapter`)
while it runs, never restarting, and generates with a loaded one when asked
(`generate(..., adapter=NAME)`); which adapters stay loaded is the caller's
choice (`ray_gitops.llm.adapters`).

Adapters: `ray_gitops.llm.ngram` (CPU), `ray_gitops.llm.vllm_engine` (vLLM).
Values and a protocol only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import AsyncGenerator, Mapping, Protocol, Sequence, runtime_checkable

__all__ = [
    "SamplingParams", "Prompt", "Usage", "Delta", "Embedded", "EngineRefused", "Engine", "Embedder", "AdapterEngine",
]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample: `temperature` 0 is greedy; generation stops after `max_tokens`
    tokens (finish_reason "length") or at a `stop` string, left out of the text ("stop")."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class Prompt:
    """A completion's text, or a chat's messages (`{"role", "content"}`)."""

    text: str | None = None
    messages: tuple[Mapping[str, str], ...] | None = None


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class Delta:
    """New text and the tokens it holds; the last delta has `finish_reason` and `usage`."""

    text: str
    tokens: int
    finish_reason: str | None = None
    usage: Usage | None = None


@dataclass(frozen=True)
class Embedded:
    vectors: tuple[tuple[float, ...], ...]
    prompt_tokens: int


class EngineRefused(Exception):
    """The engine will not run this request as asked (answered 400 with `code` and `param`)."""

    def __init__(self, message: str, code: str = "invalid_request", param: str | None = None) -> None:
        super().__init__(message)
        self.code, self.param = code, param


class Engine(Protocol):
    """A generating engine behind the OpenAI endpoint."""

    def models(self) -> Sequence[str]:
        """The model names clients may send as `model` (the first is the base model)."""
        ...

    def generate(self, prompt: Prompt, params: SamplingParams, request_id: str) -> AsyncGenerator[Delta, None]:
        """The request's text as it is produced; closing the iterator stops the request."""
        ...


@runtime_checkable
class Embedder(Protocol):
    """An engine that also embeds (`/v1/embeddings`)."""

    async def embed(self, texts: Sequence[str]) -> Embedded: ...


@runtime_checkable
class AdapterEngine(Protocol):
    """An engine that applies LoRA adapters over its base model, loaded and unloaded while it runs."""

    def models(self) -> Sequence[str]: ...

    async def load_adapter(self, name: str, path: str) -> None:
        """Load the adapter at `path` (a local file or directory) as `name`; the engine keeps running."""
        ...

    async def unload_adapter(self, name: str) -> None: ...

    def adapters(self) -> Sequence[str]:
        """The adapters loaded now."""
        ...

    def generate(
        self, prompt: Prompt, params: SamplingParams, request_id: str, adapter: str | None = None
    ) -> AsyncGenerator[Delta, None]:
        """As `Engine.generate`, with the loaded adapter `adapter` applied (None: the base model)."""
        ...
