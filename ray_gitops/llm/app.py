"""The built-in OpenAI-compatible backend: what a `[backends.NAME.llm]` backend's replicas run.

The loader points such a backend at `OpenAIBackend` (`vocabulary.spec.llm.BUILTIN_APP`)
and passes its `[llm]` table as the `llm` keyword. This module builds the
engine the table names, over the model staged for the replica
(`ray_gitops.serving.model_path`), and serves it through the engine-agnostic
OpenAI layer (`ray_gitops.llm.http.OpenAIApp`), an ASGI app; the requests
running are the load the replica reports to the proxy.
"""

from __future__ import annotations

from typing import Any

from ray_gitops import serving
from ray_gitops.llm.engine import Engine
from ray_gitops.llm.http import OpenAIApp
from vocabulary.spec.llm import LLMConfig, LLMEngine

__all__ = ["OpenAIBackend", "build_engine"]


def build_engine(config: LLMConfig, model_path: str | None) -> Engine:
    """The engine `config` names, its weights (or training text) at `model_path`."""
    name = config.served_model_name or config.model or "ngram"
    if config.engine is LLMEngine.NGRAM:
        from ray_gitops.llm.ngram import NgramEngine

        return NgramEngine.from_args(model_path, name, config.max_model_len, config.engine_args)
    from ray_gitops.llm.vllm_engine import VLLMEngine, engine_kwargs

    if model_path is None:
        raise ValueError("engine 'vllm' needs llm.model")
    return VLLMEngine(engine_kwargs(model_path, name, config.tensor_parallel_size, config.max_model_len,
                                    config.engine_args))


def _report(running: int) -> None:
    try:
        serving.report_load(running)
    except RuntimeError:  # outside a replica (a test that builds the app itself)
        pass


class OpenAIBackend:
    """An `[llm]` backend's replica: OpenAI's API over the engine its table names."""

    def __init__(self, llm: dict[str, Any]) -> None:
        config = LLMConfig.model_validate(llm)
        path = serving.model_path(config.model) if config.model is not None else None
        self.app = OpenAIApp(build_engine(config, path), on_load=_report)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)
