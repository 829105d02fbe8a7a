"""A slow plain (non-streaming) handler that counts the calls cancelled under it."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request


class Sleeper:
    def __init__(self) -> None:
        self.cancelled = 0
        self.finished = 0

    async def __call__(self, request: Request) -> Any:
        if request.url.path.endswith("/stats"):
            return {"cancelled": self.cancelled, "finished": self.finished}
        try:
            await asyncio.sleep(float(request.query_params.get("s", "5")))
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        self.finished += 1
        return "done"
