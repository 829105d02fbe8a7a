"""The built-in OpenAI-compatible backend: what a `[backends.NAME.llm]` backend's replicas run.

The loader points such a backend at `OpenAIBackend` (`vocabulary.spec.llm.BUILTIN_APP`)
and passes its `[llm]` table as the `llm` keyword. This module builds the
engine the table names, over the model staged for the replica
(`ray_gitops.serving.model_path`), and serves it through the engine-agnostic
OpenAI layer (`ray_gitops.llm.http.OpenAIApp`), an ASGI app; the requests
running are the load the replica reports to the proxy. The table's LoRA
adapters (`lora_adapters`, each staged like the model) are loaded into that
engine when first asked for (`ray_gitops.llm.adapters`); `ENGINE_STARTS`
counts the engines this process built, which `/v1/stats` says (a loaded
adapter never adds one). Its token counts per model go to the node's file
within a second of a request's end (`ray_gitops.llm.publishing`, to the sink
the replica host installed), whence the node's proxies export them to
Prometheus; a replica that drains (the ASGI lifespan's shutdown) publishes
what is left before it stops.
"""

from __future__ import annotations

from typing import Any, Mapping

from ray_gitops import serving
from ray_gitops.asgi import Receive, Send
from ray_gitops.llm.adapters import Adapters
from ray_gitops.llm.publishing import TokenPublisher
from ray_gitops.registry import installed_token_sink
from ray_gitops.llm.engine import AdapterEngine, Engine
from ray_gitops.llm.http import OpenAIApp
from vocabulary.spec.llm import LLMConfig, LLMEngine

__all__ = ["OpenAIBackend", "build_engine", "build_adapters", "ENGINE_STARTS"]

# Engines built in this process (one per replica: a replica's process runs one).
ENGINE_STARTS = [0]


def build_engine(config: LLMConfig, model_path: str | None) -> Engine:
    """The engine `config` names, its weights (or training text) at `model_path`."""
    name = config.served_model_name or config.model or "ngram"
    ENGINE_STARTS[0] += 1
    if config.engine is LLMEngine.NGRAM:
        from ray_gitops.llm.ngram import NgramEngine

        return NgramEngine.from_args(model_path, name, config.max_model_len, config.engine_args)
    from ray_gitops.llm.vllm_engine import VLLMEngine, engine_kwargs

    if model_path is None:
        raise ValueError("engine 'vllm' needs llm.model")
    return VLLMEngine(engine_kwargs(model_path, name, config.tensor_parallel_size, config.max_model_len,
                                    config.engine_args, config.max_loras if config.lora_adapters else None))


def build_adapters(config: LLMConfig, engine: Engine, paths: Mapping[str, str]) -> Adapters | None:
    """The table's LoRA adapters over `engine`, staged at `paths` by name; None when it has none."""
    if not config.lora_adapters:
        return None
    if not isinstance(engine, AdapterEngine):
        raise ValueError(f"engine '{config.engine.value}' cannot load LoRA adapters")
    return Adapters(engine, {name: paths[name] for name in config.lora_adapters}, config.max_loras)


def _about() -> dict[str, Any]:
    return {"starts": ENGINE_STARTS[0]}


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
        engine = build_engine(config, path)
        adapters = build_adapters(config, engine, {name: serving.model_path(name) for name in config.lora_adapters})
        sink = installed_token_sink()
        publisher: TokenPublisher | None = None
        self._publisher: TokenPublisher | None = None

        def on_load(running: int) -> None:  # after each request's start and end
            _report(running)
            if publisher is not None:
                publisher.changed()

        self.app = OpenAIApp(engine, on_load=on_load, adapters=adapters, about=_about)
        if sink is not None:
            publisher = self._publisher = TokenPublisher(self.app.stats.counts, sink)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan" and self._publisher is not None:
            await _publishing_at_shutdown(receive, send, self._publisher)
            return
        await self.app(scope, receive, send)


async def _publishing_at_shutdown(receive: Receive, send: Send, publisher: TokenPublisher) -> None:
    """The lifespan protocol: at its shutdown (the replica drains) the counts not yet published go first."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await publisher.publish()
            await send({"type": "lifespan.shutdown.complete"})
            return
