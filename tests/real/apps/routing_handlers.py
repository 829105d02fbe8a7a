"""Test user code for the routing policies' real tier: each answer names the replica that gave it."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse

from ray_gitops import serving

__all__ = ["WhoAmI", "CountsItsRequests", "ReportsLoad", "Tokens", "CalledWhoAmI", "Relay"]


class WhoAmI:
    """Answers with its replica id, after `?sleep=SECONDS` if asked."""

    async def __call__(self, request: Request) -> dict[str, str]:
        await request.body()
        sleep_s = float(request.query_params.get("sleep", "0"))
        if sleep_s:
            await asyncio.sleep(sleep_s)
        return {"replica": serving.context().replica_id}


class CountsItsRequests:
    """Reports as its load the requests it has served so far (`ray_gitops.serving.report_load`)."""

    def __init__(self) -> None:
        self.served = 0

    async def __call__(self, request: Request) -> dict[str, str]:
        self.served += 1
        serving.report_load(self.served)
        return {"replica": serving.context().replica_id}


class ReportsLoad:
    """Reports a fixed load (its init argument) on every request, as an engine reporting KV-cache use would."""

    def __init__(self, load: float) -> None:
        self.load = load

    async def __call__(self, request: Request) -> dict[str, str]:
        serving.report_load(self.load)
        return {"replica": serving.context().replica_id}


class Tokens:
    """Streams `?n=` tokens, `?gap=` seconds apart, as an LLM streams its output."""

    async def __call__(self, request: Request):  # an async generator: the answer streams
        count, gap_s = int(request.query_params.get("n", "5")), float(request.query_params.get("gap", "0.02"))
        for n in range(count):
            await asyncio.sleep(gap_s)
            yield f"token{n} "


class CalledWhoAmI:
    """A handle callee: answers any argument with its replica id."""

    async def __call__(self, value: object) -> dict[str, str]:
        return {"replica": serving.context().replica_id}


class Relay:
    """Calls backend `?to=NAME` through a handle with the request's JSON body, as a dict; answers its answer,
    or 502 with the handle's error (its type and message), so a failing test says why."""

    async def __call__(self, request: Request) -> object:
        body = await request.json()
        try:
            return await serving.handle(request.query_params["to"]).remote(body)
        except Exception as error:  # noqa: BLE001 — the caller's test shows it
            return JSONResponse({"error": f"{type(error).__name__}: {error}"}, status_code=502)
