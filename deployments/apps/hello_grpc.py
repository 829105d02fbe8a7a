"""A gRPC servicer as a backend (docs/guides/grpc.md): methods named as the gRPC methods of
`helloworld.Greeter`, raw bytes in and out (a method may take and return protobuf messages instead).
"""

from __future__ import annotations

from typing import AsyncGenerator

from starlette.requests import Request


class Greeter:
    def __init__(self, version: str) -> None:
        self.version = version

    def __call__(self, request: Request) -> dict[str, str]:  # the endpoint's HTTP route
        return {"version": self.version}

    async def SayHello(self, request: bytes) -> bytes:  # noqa: N802 — unary, named as the gRPC method
        return f"{self.version}: hello {request.decode()}".encode()

    async def SayHellos(self, request: bytes) -> AsyncGenerator[bytes, None]:  # noqa: N802 — server streaming
        for n in range(3):
            yield f"{self.version}: hello #{n} {request.decode()}".encode()
