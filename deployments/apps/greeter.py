"""A greeter in a progressive rollout: answers who served the request, and can be told to fail.

`greeter-v1` and `greeter-v2` (deployments/canary.toml) run this class with
different labels. `user_config = { error_share = 0.2 }` makes exactly that
share of the requests answer 500 (every fifth one), and `delay_s` slows each
answer: a way to watch a rollout's checks stop a bad version.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse


class Greeter:
    def __init__(self, label: str) -> None:
        self.label = label
        self.error_share = 0.0
        self.delay_s = 0.0
        self._answered = 0

    def reconfigure(self, user_config: dict[str, Any]) -> None:
        self.error_share = float(user_config.get("error_share", 0.0))
        self.delay_s = float(user_config.get("delay_s", 0.0))

    async def __call__(self, request: Request) -> JSONResponse:
        self._answered += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if int(self._answered * self.error_share) > int((self._answered - 1) * self.error_share):
            return JSONResponse({"version": self.label, "error": "told to fail"}, status_code=500)
        name = request.query_params.get("name", "world")
        return JSONResponse({"version": self.label, "greeting": f"hello, {name}", "served_at": time.time()})
