"""Test user code for the proxy's real tier: handlers as a user would write them."""

from __future__ import annotations

import asyncio
import os

from starlette.requests import Request
from starlette.responses import Response

__all__ = ["Echo", "Named", "Raises", "Sleeps", "Mortal", "Keeps"]


class Echo:
    """Sends back the body with what it saw of the request in headers."""

    async def __call__(self, request: Request) -> Response:
        body = await request.body()
        return Response(
            body,
            headers={
                "x-method": request.method,
                "x-path": request.url.path,
                "x-query": request.url.query,
                "x-custom": request.headers.get("x-custom", ""),
            },
            media_type="application/octet-stream",
        )


class Named:
    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, request: Request) -> dict[str, str]:
        return {"backend": self._name}


def Raises(request: Request) -> str:  # noqa: N802 — a user's function handler
    raise RuntimeError("secret detail from user code")


class Sleeps:
    def __init__(self) -> None:
        self.ongoing = 0

    async def __call__(self, request: Request) -> str:
        await asyncio.sleep(float(request.query_params.get("s", "3")))
        return "slept"


class Mortal:
    """A replica dying mid-request.

    `?die=1` kills every replica it reaches; `?die_once=PATH` kills only the
    first one to create PATH, so a retry on another replica survives.
    """

    async def __call__(self, request: Request) -> str:
        if request.query_params.get("die") == "1":
            os._exit(1)
        marker = request.query_params.get("die_once")
        if marker:
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return "survivor"
            os._exit(1)
        return "alive"


class Keeps:
    """Keeps every POST body it is given; a GET answers them all, so tests see what arrived."""

    def __init__(self) -> None:
        self.bodies: list[str] = []

    async def __call__(self, request: Request) -> dict[str, list[str]]:
        if request.method == "POST":
            self.bodies.append((await request.body()).decode())
        return {"bodies": self.bodies}
