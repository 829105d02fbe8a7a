"""A test-only replica speaking the proxy wire format, plus the handlers tests use.

Mirrors the controller's replica contract (`handle_request(wire) -> wire`,
user exceptions propagate as the call's error) so the proxy's real tier can
run before and independently of controller/replica.py.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from proxy.wire import WireRequest, WireResponse, to_starlette_request, to_wire_response

__all__ = ["TestReplica"]


class TestReplica:
    __test__ = False

    def __init__(self, behaviour: str = "echo", name: str = "") -> None:
        self._behaviour = behaviour
        self._name = name
        self._ongoing = 0

    async def handle_request(self, wire: WireRequest) -> WireResponse:
        self._ongoing += 1
        try:
            request = to_starlette_request(wire)
            return to_wire_response(await self._handle(request))
        finally:
            self._ongoing -= 1

    async def num_ongoing(self) -> int:
        return self._ongoing

    async def _handle(self, request: Request) -> Any:
        behaviour = self._behaviour
        if behaviour == "echo":
            body = await request.body()
            return Response(
                body,
                headers={"x-method": request.method, "x-path": request.url.path,
                         "x-query": request.url.query, "x-replica": self._name},
                media_type=request.headers.get("content-type", "application/octet-stream"),
            )
        if behaviour == "name":
            return {"replica": self._name}
        if behaviour == "raise":
            raise RuntimeError("boom from user code")
        if behaviour == "sleep":
            await asyncio.sleep(float(request.query_params.get("s", "5")))
            return "slept"
        if behaviour == "die":
            os._exit(1)
        raise ValueError(behaviour)
