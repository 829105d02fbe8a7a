"""Test user code for multiplexing's real tier: a replica that loads models by id,
at most `max_models_per_replica` at a time, and says what it loaded and unloaded;
and a backend that calls it through a handle with a model id of its query's choosing."""

from __future__ import annotations

import asyncio

from starlette.requests import Request

from ray_gitops import serving

__all__ = ["ManyModels", "Composer"]


class _Model:
    def __init__(self, name: str, unloaded: list[str]) -> None:
        self.name = name
        self._unloaded = unloaded

    async def unload(self) -> None:
        self._unloaded.append(self.name)


class ManyModels:
    """Answers with its replica, the model it served, and every load and unload so far
    (after `?sleep=SECONDS`, if asked)."""

    def __init__(self) -> None:
        self.loads: list[str] = []
        self.unloads: list[str] = []

    @serving.multiplexed
    async def model(self, model_id: str) -> _Model:
        self.loads.append(model_id)
        await asyncio.sleep(0.05)  # loading takes a while: concurrent requests share it
        return _Model(model_id, self.unloads)

    async def __call__(self, request: Request | str) -> dict[str, object]:
        if isinstance(request, str):  # a handle call: the model id is its argument
            return {"model": (await self.model(request)).name, "loads": self.loads}
        model_id = serving.model_id()
        if model_id is None:
            return {"replica": serving.context().replica_id, "model": None}
        model = await self.model(model_id)
        sleep_s = float(request.query_params.get("sleep", "0"))
        if sleep_s:
            await asyncio.sleep(sleep_s)
        return {
            "replica": serving.context().replica_id,
            "model": model.name,
            "loads": self.loads,
            "unloads": self.unloads,
        }


class Composer:
    """Calls backend `?target=` through a handle with model id `?model=`; answers with the
    callee's answer, or the error the handle raised."""

    async def __call__(self, request: Request) -> dict[str, object]:
        callee = serving.handle(request.query_params["target"])
        try:
            return {"answer": await callee.remote(request.query_params["model"])}
        except serving.HandleError as error:
            return {"error": str(error)}
