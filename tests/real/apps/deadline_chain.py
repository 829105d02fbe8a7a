"""A composition chain for deadlines that travel: `Caller` calls `Callee` through a handle; the callee
sleeps as long as it is asked (its own time, far beyond a client's deadline) and keeps, per call, the
`time_left()` it saw, how the call ended and how long it ran, answered on its own HTTP route."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from starlette.requests import Request

from ray_gitops import serving

CALLEE = "deadline-callee"


class Callee:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def __call__(self, argument: Any) -> Any:
        if isinstance(argument, Request):  # its stats route
            return {"calls": self.calls}
        call: dict[str, Any] = {"left": serving.time_left(), "ended": None, "ran_s": None}
        self.calls.append(call)
        started = time.monotonic()
        try:
            await asyncio.sleep(float(argument))
            call["ended"] = "finished"
        except asyncio.CancelledError:
            call["ended"] = "cancelled"
            raise
        finally:
            call["ran_s"] = time.monotonic() - started
        return "slept"


class Caller:
    def __init__(self, callee: str = CALLEE) -> None:
        self.callee = serving.handle(callee)

    async def __call__(self, request: Request) -> Any:
        left = serving.time_left()
        answer = await self.callee.remote(request.query_params.get("s", "5"))
        return {"answer": answer, "left": left}
