"""An `[llm]` replica's LoRA adapters: which are declared, which are loaded, loading one on demand.

The backend's `lora_adapters` are `[models.NAME]` entries staged on the node
with the base model (`ray_gitops.serving.model_path`); `Adapters` knows their
paths and loads one into the running engine (`AdapterEngine.load_adapter`)
the first time a request names it, never restarting the engine. At most
`max_loras` stay loaded, the least recently used unloaded first, and an
adapter asked for while it loads is loaded once: the multiplexed backends'
`ray_gitops.model_slots.ModelSlots` keeps them, and notes each load and
eviction in the request's `RequestModels`, whose report
(`vocabulary.request_path.multiplexing.report`) the OpenAI app adds to its
answer so the proxy sends the adapter's next requests to this replica.
"""

from __future__ import annotations

from typing import Mapping

from ray_gitops.llm.engine import AdapterEngine
from ray_gitops.model_slots import ModelSlots
from vocabulary.request_path.multiplexing import RequestModels

__all__ = ["Adapters"]


class _Loaded:
    """An adapter loaded in the engine; `unload` takes it out (ModelSlots calls it on eviction)."""

    def __init__(self, engine: AdapterEngine, name: str) -> None:
        self._engine, self.name = engine, name

    async def unload(self) -> None:
        await self._engine.unload_adapter(self.name)


class Adapters:
    """The adapters one replica serves over `engine`: `paths` by name, at most `max_loras` loaded."""

    def __init__(self, engine: AdapterEngine, paths: Mapping[str, str], max_loras: int) -> None:
        self.engine = engine
        self._paths = dict(paths)
        self._slots: ModelSlots[_Loaded] = ModelSlots(self._load, max_loras)

    def names(self) -> list[str]:
        """Every adapter clients may name, in the spec's order."""
        return list(self._paths)

    def __contains__(self, name: object) -> bool:
        return name in self._paths

    def loaded(self) -> list[str]:
        """The adapters loaded now, least recently used first."""
        return self._slots.loaded()

    def counts(self) -> dict[str, int]:
        return {"loads": self._slots.loads, "evictions": self._slots.evictions}

    async def ensure(self, name: str, record: RequestModels | None = None) -> None:
        """`name` loaded in the engine (loading it, and unloading the least recently used, if need be)."""
        await self._slots.get(name, record)

    async def _load(self, name: str) -> _Loaded:
        await self.engine.load_adapter(name, self._paths[name])
        return _Loaded(self.engine, name)
