"""Test user code for the routing policies' real tier: each answer names the replica that gave it."""

from __future__ import annotations

import asyncio

from starlette.requests import Request

from gitops import serving

__all__ = ["WhoAmI"]


class WhoAmI:
    """Answers with its replica id, after `?sleep=SECONDS` if asked."""

    async def __call__(self, request: Request) -> dict[str, str]:
        await request.body()
        sleep_s = float(request.query_params.get("sleep", "0"))
        if sleep_s:
            await asyncio.sleep(sleep_s)
        return {"replica": serving.context().replica_id}
