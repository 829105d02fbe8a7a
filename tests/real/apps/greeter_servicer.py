"""Test user code for the gRPC servicer tests: `helloworld.Greeter`'s servicer as a grpcio user writes one,
subclassing the class protoc's gRPC plugin generated (helloworld_pb2_grpc.py beside it, from deployments/apps/helloworld.proto:
`make hello-proto`), its methods called as grpcio calls a servicer's: parsed messages, a context."""

from __future__ import annotations

from typing import Any, AsyncIterator, Iterator

import grpc
from starlette.requests import Request

import helloworld_pb2
import helloworld_pb2_grpc

__all__ = ["Greeter"]


class Greeter(helloworld_pb2_grpc.GreeterServicer):
    """SayHello greets (an empty name aborts INVALID_ARGUMENT, `tenant` metadata is echoed), SayHellos
    streams three greetings from a plain generator, Sum counts the names of a stream of requests,
    Chat is left to the generated class (UNIMPLEMENTED)."""

    def __init__(self, version: str) -> None:
        self.version = version

    def __call__(self, request: Request) -> str:  # its endpoint's HTTP route
        return self.version

    async def SayHello(self, request: helloworld_pb2.HelloRequest, context: Any) -> helloworld_pb2.HelloReply:  # noqa: N802
        if not request.name:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "a name, please")
        tenant = dict(context.invocation_metadata()).get("tenant", "nobody")
        return helloworld_pb2.HelloReply(message=f"{self.version}: hello {request.name} (for {tenant})")

    def SayHellos(self, request: helloworld_pb2.HelloRequest, context: Any) -> Iterator[helloworld_pb2.HelloReply]:  # noqa: N802
        for n in range(3):
            yield helloworld_pb2.HelloReply(message=f"{self.version}: hello #{n} {request.name}")

    async def Sum(self, request_iterator: AsyncIterator[helloworld_pb2.HelloRequest], context: Any) -> helloworld_pb2.HelloReply:  # noqa: N802,E501
        names = [request.name async for request in request_iterator]
        return helloworld_pb2.HelloReply(message=f"{self.version}: {len(names)} names, {' '.join(names)}")
