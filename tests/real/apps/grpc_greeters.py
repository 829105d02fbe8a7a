"""Test user code for the gRPC ingress's real test: a servicer as a Ray Serve user writes one, its
methods named as the gRPC methods, raw bytes in and out (no generated code)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import AsyncGenerator, AsyncIterator

from starlette.requests import Request

__all__ = ["Greeter"]


class Greeter:
    """`demo.Greeter`: SayHello answers with its backend's name, Count streams, Sum takes a stream of
    numbers, Chat answers each message of a stream as it comes, Slow sleeps, Hold waits for a file."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, request: Request) -> str:  # its endpoint's HTTP route
        return self._name

    async def SayHello(self, request: bytes) -> bytes:  # noqa: N802 — named as the gRPC method
        return f"{self._name}: hello {request.decode()}".encode()

    async def Count(self, request: bytes) -> AsyncGenerator[bytes, None]:  # noqa: N802
        for n in range(int(request)):
            await asyncio.sleep(0.05)
            yield f"{self._name} {n}".encode()

    async def Sum(self, requests: AsyncIterator[bytes]) -> bytes:  # noqa: N802 — client streaming
        total = 0
        async for request in requests:
            total += int(request)
        return f"{self._name}: {total}".encode()

    async def Chat(self, requests: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:  # noqa: N802 — bidirectional
        async for request in requests:
            yield f"{self._name} heard {request.decode()}".encode()

    async def Slow(self, request: bytes) -> bytes:  # noqa: N802
        await asyncio.sleep(float(request))
        return b"late"

    async def Hold(self, request: bytes) -> bytes:  # noqa: N802
        """Holds the call until the file named by the request exists (the test lets every call go at once)."""
        released = Path(request.decode())
        while not released.exists():
            await asyncio.sleep(0.05)
        return b"released"
