"""gRPC calls to a backend that names a generated servicer (`grpc_servicer`), through the proxy in-process:
grpcio's server with the proxy's handler, the endpoint's method kinds as the agent derives them
(`grpc_methods`, no `grpc_streaming`), fake replicas running the replica host's dispatch over the servicer
the generated add function registers (`replica.calling.servicers`), and a grpcio client using the
generated stub of deployments/apps/helloworld.proto (tests/real/apps) (no Ray)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import grpc
import grpc.aio
import pytest

from replica.calling.grpc_calls import GrpcMethods
from replica.calling.servicers import load_servicer
from tests.support.grpc_replicas import GrpcCaller, run_grpc
from tests.support.proxy_app import FakeReplica, Proxy
from vocabulary.spec.endpoints import GrpcMethodKind

pytestmark = pytest.mark.component

APPS = str(Path(__file__).resolve().parents[1] / "real" / "apps")
SERVICER = "helloworld_pb2_grpc:add_GreeterServicer_to_server"
KINDS = {"SayHello": GrpcMethodKind.UNARY_UNARY, "SayHellos": GrpcMethodKind.UNARY_STREAM,
         "Sum": GrpcMethodKind.STREAM_UNARY, "Chat": GrpcMethodKind.STREAM_STREAM}


@pytest.fixture(scope="module")
def generated() -> Iterator[tuple[Any, Any]]:
    sys.path.insert(0, APPS)
    try:
        import helloworld_pb2
        import helloworld_pb2_grpc

        yield helloworld_pb2, helloworld_pb2_grpc
    finally:
        sys.path.remove(APPS)


def proxy_of(servicer: Any) -> Proxy:
    replica = FakeReplica("v1", GrpcMethods(servicer, load_servicer(SERVICER, servicer)).call)  # type: ignore[arg-type]
    proxy = Proxy()
    proxy.app.caller = proxy.app.sender._caller = GrpcCaller()  # type: ignore[assignment]
    proxy.serve("greet", "/greet", {"v1": [replica]}, grpc_service="helloworld.Greeter", grpc_methods=KINDS)
    return proxy


def test_each_kind_of_method_is_called_as_grpcio_calls_a_servicer(generated: tuple[Any, Any]) -> None:
    pb2, pb2_grpc = generated

    class Greeter(pb2_grpc.GreeterServicer):  # type: ignore[misc]
        async def SayHello(self, request: Any, context: Any) -> Any:  # noqa: N802
            if not request.name:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "a name, please")
            tenant = dict(context.invocation_metadata()).get("tenant", "nobody")
            return pb2.HelloReply(message=f"hello {request.name} for {tenant}")

        def SayHellos(self, request: Any) -> Iterator[Any]:  # noqa: N802 — a plain generator, no context
            for n in range(3):
                yield pb2.HelloReply(message=f"#{n} {request.name}")

        def Sum(self, request_iterator: Any, context: Any) -> Any:  # noqa: N802 — a plain def, in a thread
            return pb2.HelloReply(message=" ".join(request.name for request in request_iterator))

        # Chat: the generated class's stub (it sets UNIMPLEMENTED, then raises)

    async def requests(*names: str) -> AsyncIterator[Any]:
        for name in names:
            yield pb2.HelloRequest(name=name)

    async def test(channel: grpc.aio.Channel) -> None:
        stub = pb2_grpc.GreeterStub(channel)
        reply = await stub.SayHello(pb2.HelloRequest(name="ada"), metadata=(("tenant", "acme"),))
        assert reply.message == "hello ada for acme"
        assert [reply.message async for reply in stub.SayHellos(pb2.HelloRequest(name="bob"))] == [
            "#0 bob", "#1 bob", "#2 bob"]
        assert (await stub.Sum(requests("a", "b", "c"))).message == "a b c"
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.SayHello(pb2.HelloRequest(name=""))
        assert (refused.value.code(), refused.value.details()) == (grpc.StatusCode.INVALID_ARGUMENT, "a name, please")
        chat = stub.Chat(requests("x"))
        with pytest.raises(grpc.aio.AioRpcError) as unimplemented:
            await chat.read()
        assert unimplemented.value.code() == grpc.StatusCode.UNIMPLEMENTED
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await channel.unary_unary("/helloworld.Greeter/Missing")(b"")
        assert unknown.value.code() == grpc.StatusCode.UNIMPLEMENTED

    proxy = proxy_of(Greeter())
    run_grpc(proxy, test)
    assert [status for _, _, status in proxy.recorded.requests] == [200, 200, 200, 400, 501, 501]
