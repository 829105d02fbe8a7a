"""`@ray_gitops.serving.multiplexed`: the models one multiplexed replica keeps loaded.

User code's async loader (`async def load(self, model_id)`) is wrapped so
that `ModelSlots` keeps at most `max_models_per_replica` (the backend's
`[backends.X.multiplex]`, installed by the replica host in
`ray_gitops.registry`) loaded, least recently used out first; a model
asked for while it loads is loaded once (the askers share that load); an
evicted model is dropped, its `unload()` called (and awaited) when it has
one. An id the backend does not accept (its `models` / `model_pattern`, or
the default safe set) is refused with `ModelRefused` before the loader sees
it, whoever asks: the proxy checks a request's header, but a handle call
from another backend, or an id user code read from a body, reaches the
loader only through here. Each load and eviction is noted in the current request's
`vocabulary.request_path.multiplexing.RequestModels`, which the replica's answer reports
to the proxy. Runs inside a replica only; no I/O.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections import OrderedDict
from typing import Any, Awaitable, Callable, Generic, TypeVar

from ray_gitops.registry import current_request, installed_multiplex, register
from vocabulary.request_path.multiplexing import RequestModels
from vocabulary.replicas.serving import ModelRefused

__all__ = ["ModelSlots", "multiplexed"]

T = TypeVar("T")
M = TypeVar("M")


class ModelSlots(Generic[M]):
    """At most `capacity` loaded models, least recently used first out; one load per model at a time."""

    def __init__(self, load: Callable[[str], Awaitable[M]], capacity: int) -> None:
        self._load = load
        self._capacity = capacity
        self._models: OrderedDict[str, M] = OrderedDict()
        self._loading: dict[str, asyncio.Future[M]] = {}
        self.loads = 0
        self.evictions = 0

    def loaded(self) -> list[str]:
        return list(self._models)

    async def get(self, model_id: str, record: RequestModels | None = None) -> M:
        if model_id in self._models:
            self._models.move_to_end(model_id)
            return self._models[model_id]
        pending = self._loading.get(model_id)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[M] = asyncio.get_running_loop().create_future()
        self._loading[model_id] = future
        try:
            while self._models and len(self._models) + len(self._loading) > self._capacity:
                evicted_id, evicted = self._models.popitem(last=False)
                self.evictions += 1
                if record is not None:
                    record.evicted.append(evicted_id)
                await _unload(evicted)
            model = await self._load(model_id)
        except BaseException as error:
            future.set_exception(error)
            future.exception()  # retrieved: waiters (if any) get it, nobody else must
            raise
        finally:
            del self._loading[model_id]
        self._models[model_id] = model
        self.loads += 1
        if record is not None:
            record.loaded = True
        future.set_result(model)
        return model


async def _unload(model: object) -> None:
    unload = getattr(model, "unload", None)
    if callable(unload):
        result = unload()
        if inspect.isawaitable(result):
            await result


def multiplexed(loader: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """`@ray_gitops.serving.multiplexed` on `async def load(self, model_id)` (or a function of the id)."""
    if not inspect.iscoroutinefunction(loader):
        raise TypeError(f"@multiplexed needs an async function taking the model id; {loader.__qualname__} is not async")
    by_owner: dict[int, ModelSlots[T]] = {}

    @functools.wraps(loader)
    async def load(*args: Any) -> T:
        if len(args) not in (1, 2):
            raise TypeError(f"{loader.__qualname__}: called with {len(args)} arguments; it takes the model id")
        owner, model_id = (args[0], args[1]) if len(args) == 2 else (None, args[0])
        if not isinstance(model_id, str):
            raise TypeError(f"{loader.__qualname__}: the model id must be a str (got {type(model_id).__name__})")
        settings = installed_multiplex()
        if settings is None:
            raise RuntimeError(
                f"{loader.__qualname__} is @multiplexed, but this backend has no [backends.NAME.multiplex] table"
            )
        if not settings.accepts(model_id):
            shown = model_id if len(model_id) <= 80 else model_id[:80] + "..."
            raise ModelRefused(f"{loader.__qualname__}: model id {shown!r} refused: this backend accepts {settings.accepted}")
        slots = by_owner.get(id(owner))
        if slots is None:
            bound: Callable[[str], Awaitable[T]] = (
                functools.partial(loader, owner) if owner is not None else loader
            )
            slots = ModelSlots(bound, settings.max_models)
            by_owner[id(owner)] = slots
            register(slots.loaded)
        return await slots.get(model_id, current_request())

    return load
