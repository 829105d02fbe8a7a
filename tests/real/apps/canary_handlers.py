"""Test user code for the rollout tests: a version that fails an exact share of its requests, or is slow."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse

__all__ = ["Versioned"]


class Versioned:
    """Answers `{"backend": name}` after `delay_s`; every 1/error_share-th answer is a 500."""

    def __init__(self, name: str, error_share: float = 0.0, delay_s: float = 0.0) -> None:
        self._name = name
        self._error_share = error_share
        self._delay_s = delay_s
        self._answered = 0

    async def __call__(self, request: Request) -> JSONResponse:
        self._answered += 1
        if self._delay_s:
            await asyncio.sleep(self._delay_s)
        failing = int(self._answered * self._error_share) > int((self._answered - 1) * self._error_share)
        return JSONResponse({"backend": self._name}, status_code=500 if failing else 200)
