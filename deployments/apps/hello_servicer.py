"""An example backend that implements a generated gRPC servicer (docs/guides/grpc.md): `helloworld.Greeter`
of helloworld.proto, whose helloworld_pb2*.py beside it protoc generated (`make hello-proto`). The spec
names `grpc_servicer = "deployments.apps.helloworld_pb2_grpc:add_GreeterServicer_to_server"`, and the
replicas call these methods as grpcio calls a servicer's."""

from __future__ import annotations

from typing import Any, AsyncIterator

import grpc

from deployments.apps import helloworld_pb2, helloworld_pb2_grpc


class Greeter(helloworld_pb2_grpc.GreeterServicer):
    """SayHello and Sum; SayHellos and Chat answer UNIMPLEMENTED (the generated class's)."""

    def __init__(self, version: str) -> None:
        self.version = version

    def __call__(self, request: Any) -> dict[str, str]:  # the endpoint's HTTP route
        return {"version": self.version}

    async def SayHello(self, request: helloworld_pb2.HelloRequest, context: Any) -> helloworld_pb2.HelloReply:  # noqa: N802
        if not request.name:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "a name, please")
        return helloworld_pb2.HelloReply(message=f"{self.version}: hello {request.name}")

    async def Sum(  # noqa: N802 — client streaming
        self, request_iterator: AsyncIterator[helloworld_pb2.HelloRequest], context: Any
    ) -> helloworld_pb2.HelloReply:
        names = [request.name async for request in request_iterator]
        return helloworld_pb2.HelloReply(message=f"{self.version}: {len(names)} names")
