"""The proxy's gRPC port in-process: grpcio's server with the proxy's generic handler over fake replicas
that run the replica host's gRPC dispatch (`replica.calling.grpc_calls`), called by a real grpcio client on
127.0.0.1 with raw bytes (no Ray, no generated code)."""

from __future__ import annotations

import asyncio
import collections
import os
import sys
from typing import Any, AsyncGenerator, Iterator

import grpc
import grpc.aio
import pytest

from proxy.grpc_ingress import serve_grpc
from proxy.settings import GrpcLimits, ProxySettings
from replica.calling.grpc_calls import GrpcMethods
from ray_gitops.serving import GrpcAbort
from tests.support.grpc_replicas import GrpcCaller
from tests.support.process_memory import peak_resident_bytes, reset_peak, resident_bytes
from tests.support.proxy_app import FakeReplica, Proxy
from vocabulary.spec.endpoints import LimitsConfig

pytestmark = pytest.mark.component

SERVICE = "demo.Greeter"


class Name:
    """A protobuf message's two methods a replica uses (generated classes have them)."""

    def __init__(self, text: str) -> None:
        self.text = text

    @classmethod
    def FromString(cls, data: bytes) -> Name:  # noqa: N802 — protobuf's name
        return cls(data.decode())

    def SerializeToString(self) -> bytes:  # noqa: N802
        return self.text.upper().encode()


class Greeter:
    """A backend class as a user writes one: methods named as the gRPC methods, bytes in, bytes out."""

    def __init__(self, name: str) -> None:
        self.name = name

    def SayHello(self, request: bytes) -> bytes:  # noqa: N802 — named as the gRPC method
        return f"{self.name}: hello {request.decode()}".encode()

    async def Count(self, request: bytes) -> AsyncGenerator[bytes, None]:  # noqa: N802
        for n in range(int(request)):
            yield str(n).encode()

    def Lines(self, request: bytes) -> Iterator[bytes]:  # noqa: N802 — a sync generator streams too
        yield from request.split(b",")

    async def Slow(self, request: bytes) -> bytes:  # noqa: N802
        await asyncio.sleep(float(request))
        return b"late"

    async def Typed(self, request: Name) -> Name:  # noqa: N802 — parsed and serialized by the message class
        return Name(f"hello {request.text}")

    def Fails(self, request: bytes) -> bytes:  # noqa: N802
        raise ValueError("the user's code raised")

    async def Refuses(self, request: bytes) -> bytes:  # noqa: N802 — ends its call with a code of its own
        raise GrpcAbort(grpc.StatusCode.NOT_FOUND, f"no {request.decode()} here")  # as user code writes it

    def reconfigure(self, config: Any) -> None:
        raise AssertionError("a replica hook is never a gRPC method")


def greeter(name: str) -> FakeReplica:
    return FakeReplica(name, GrpcMethods(Greeter(name)).call)  # type: ignore[arg-type]  # answers streams too


class Served:
    def __init__(self, proxy: Proxy, channel: grpc.aio.Channel) -> None:
        self.proxy, self.channel = proxy, channel

    async def unary(self, method: str, request: bytes, service: str = SERVICE, **options: Any) -> bytes:
        call = self.channel.unary_unary(f"/{service}/{method}")
        return await call(request, **options)  # type: ignore[no-any-return]

    async def streamed(self, method: str, request: bytes, **options: Any) -> list[bytes]:
        call = self.channel.unary_stream(f"/{SERVICE}/{method}")
        return [message async for message in call(request, **options)]


DEFAULT_LIMITS = GrpcLimits()


async def serving(proxy: Proxy, test: Any, limits: GrpcLimits = DEFAULT_LIMITS) -> None:
    server, port = await serve_grpc(proxy.app, "127.0.0.1", 0, limits, shared=False)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            await test(Served(proxy, channel))
    finally:
        await server.stop(None)


def proxy_with(backends: dict[str, list[FakeReplica]], **endpoint: Any) -> Proxy:
    proxy = Proxy()
    proxy.app.caller = proxy.app.sender._caller = GrpcCaller()  # type: ignore[assignment]  # the replica's dispatch in-process
    proxy.serve("greet", "/greet", backends, grpc_service=SERVICE, **endpoint)
    return proxy


def run(proxy: Proxy, test: Any, limits: GrpcLimits = DEFAULT_LIMITS) -> None:
    asyncio.run(serving(proxy, test, limits))


def code_of(error: BaseException) -> grpc.StatusCode:
    assert isinstance(error, grpc.aio.AioRpcError), error
    return error.code()


def test_a_unary_call_reaches_the_method_of_its_name_and_is_counted_as_a_request() -> None:
    replica = greeter("v1")
    proxy = proxy_with({"v1": [replica]})

    async def test(served: Served) -> None:
        assert await served.unary("SayHello", b"ada", metadata=(("x-tenant", "t1"),)) == b"v1: hello ada"

    run(proxy, test)
    assert proxy.recorded.requests == [("greet", "v1", 200)]
    method, path, _, headers, body = replica.seen[0]
    assert (method, path, body) == ("POST", f"/{SERVICE}/SayHello", b"ada")
    assert (b"x-tenant", b"t1") in headers  # the call's metadata, as headers (steering and limits read them)


def test_a_method_annotated_with_a_message_class_gets_and_returns_messages() -> None:
    proxy = proxy_with({"v1": [greeter("v1")]})

    async def test(served: Served) -> None:
        assert await served.unary("Typed", b"ada") == b"HELLO ADA"

    run(proxy, test)


def test_server_streaming_relays_each_message_async_and_sync_generators_alike() -> None:
    proxy = proxy_with({"v1": [greeter("v1")]})

    async def test(served: Served) -> None:
        assert await served.streamed("Count", b"5") == [b"0", b"1", b"2", b"3", b"4"]
        assert await served.streamed("Count", b"0") == []
        assert await served.streamed("Lines", b"a,,bc") == [b"a", b"", b"bc"]  # an empty message stays one

    run(proxy, test)
    assert [code for _, _, code in proxy.recorded.requests] == [200, 200, 200]


def test_the_traffic_split_holds_for_grpc_calls() -> None:
    proxy = proxy_with({"a": [greeter("a")], "b": [greeter("b")]}, traffic={"a": 0.9, "b": 0.1})
    answers: collections.Counter[bytes] = collections.Counter()

    async def test(served: Served) -> None:
        for _ in range(400):
            answers[(await served.unary("SayHello", b"x")).split(b":")[0]] += 1

    run(proxy, test)
    assert answers.keys() == {b"a", b"b"} and 300 <= answers[b"a"] <= 390, answers


def test_refusals_are_grpc_status_codes() -> None:
    proxy = proxy_with({"v1": [greeter("v1")]}, timeout_s=5.0)

    async def test(served: Served) -> None:
        for service, method, code in [
            ("demo.Nobody", "SayHello", grpc.StatusCode.UNIMPLEMENTED),  # no endpoint serves it
            (SERVICE, "Missing", grpc.StatusCode.UNIMPLEMENTED),  # the backend has no such method
            (SERVICE, "reconfigure", grpc.StatusCode.UNIMPLEMENTED),  # a replica hook is not a method
            (SERVICE, "_private", grpc.StatusCode.UNIMPLEMENTED),
            (SERVICE, "Fails", grpc.StatusCode.INTERNAL),  # the user's code raised
        ]:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await served.unary(method, b"x", service=service)
            assert code_of(refused.value) == code, (method, refused.value)
        with pytest.raises(grpc.aio.AioRpcError) as late:
            await served.unary("Slow", b"5", timeout=0.3)  # grpc-timeout: 300 ms
        assert code_of(late.value) == grpc.StatusCode.DEADLINE_EXCEEDED

    run(proxy, test)


def test_a_method_ends_its_call_with_the_code_it_chose_counted_as_its_http_twin() -> None:
    proxy = proxy_with({"v1": [greeter("v1")]})

    async def test(served: Served) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await served.unary("Refuses", b"ada")
        assert (code_of(refused.value), refused.value.details()) == (grpc.StatusCode.NOT_FOUND, "no ada here")

    run(proxy, test)
    assert proxy.recorded.requests == [("greet", "v1", 404)]


def test_the_endpoint_timeout_bounds_a_call_without_a_deadline() -> None:
    proxy = proxy_with({"v1": [greeter("v1")]}, timeout_s=0.2)

    async def test(served: Served) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as late:
            await served.unary("Slow", b"5")
        assert code_of(late.value) == grpc.StatusCode.DEADLINE_EXCEEDED

    run(proxy, test)
    assert proxy.recorded.requests == [("greet", "v1", 504)]


def test_a_tenant_over_its_rate_is_resource_exhausted() -> None:
    limits = LimitsConfig(requests_per_s=0.001, burst=2, key="header:x-tenant")
    proxy = proxy_with({"v1": [greeter("v1")]}, limits=limits)

    async def test(served: Served) -> None:
        ada = (("x-tenant", "ada"),)
        for _ in range(2):
            await served.unary("SayHello", b"x", metadata=ada)
        with pytest.raises(grpc.aio.AioRpcError) as limited:
            await served.unary("SayHello", b"x", metadata=ada)
        assert code_of(limited.value) == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert await served.unary("SayHello", b"x", metadata=(("x-tenant", "bob"),)) == b"v1: hello x"

    run(proxy, test)
    assert proxy.recorded.limited == ["greet"]


def test_no_replica_is_unavailable_with_retry_after() -> None:
    proxy = proxy_with({"v1": []})

    async def test(served: Served) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await served.unary("SayHello", b"x")
        assert code_of(refused.value) == grpc.StatusCode.UNAVAILABLE
        assert ("retry-after", "1") in tuple(refused.value.trailing_metadata() or ())

    run(proxy, test)
    assert proxy.recorded.requests == [("greet", "v1", 503)]


def test_oversized_messages_are_refused_before_any_replica_sees_them() -> None:
    replica = greeter("v1")
    proxy = proxy_with({"v1": [replica]}, max_body_bytes=1000)

    async def test(served: Served) -> None:
        for size in (2000, 70_000):  # over the endpoint's max_body_bytes; over the port's message limit
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await served.unary("SayHello", b"x" * size)
            assert code_of(refused.value) == grpc.StatusCode.RESOURCE_EXHAUSTED

    run(proxy, test, GrpcLimits(max_message_bytes=64 * 1024))
    assert replica.seen == []


# A grpcio client in a process of its own (so the test's process is the server's alone): 50 messages
# of 5 MiB on one channel, 16 in flight, each answered RESOURCE_EXHAUSTED.
OVERSIZED_CLIENT = """
import sys
from concurrent.futures import ThreadPoolExecutor

import grpc

call = grpc.insecure_channel(sys.argv[1]).unary_unary("/demo.Greeter/SayHello")
message = b"x" * (5 * 1024 * 1024)

def code(_):
    try:
        call(message, timeout=60)
        return "OK"
    except grpc.RpcError as error:
        return error.code().name

with ThreadPoolExecutor(16) as pool:
    print(sorted(set(pool.map(code, range(50)))))
"""


def test_oversized_messages_cost_the_server_little_more_than_their_refusals() -> None:
    # grpcio refuses a message on its length prefix; what it reads of the message before is what
    # flow control let the client send. With bandwidth probes growing the windows this process grew
    # by ~40 MB for the 250 MiB offered; with the windows kept at their start, by ~3 MB.
    replica = greeter("v1")
    proxy = proxy_with({"v1": [replica]})
    pid = os.getpid()
    seen: dict[str, Any] = {}

    async def test(served: Served) -> None:
        await served.unary("SayHello", b"warm")  # the server's first call made, before the measure
        seen["before"] = resident_bytes(pid)
        reset_peak(pid)
        client = await asyncio.create_subprocess_exec(
            sys.executable, "-c", OVERSIZED_CLIENT, seen["address"], stdout=asyncio.subprocess.PIPE)
        out, _ = await asyncio.wait_for(client.communicate(), 120)
        seen["peak"] = peak_resident_bytes(pid)
        seen["codes"] = out.decode().strip()

    async def main() -> None:
        server, port = await serve_grpc(proxy.app, "127.0.0.1", 0, DEFAULT_LIMITS, shared=False)
        seen["address"] = f"127.0.0.1:{port}"
        try:
            async with grpc.aio.insecure_channel(seen["address"]) as channel:
                await test(Served(proxy, channel))
        finally:
            await server.stop(None)

    asyncio.run(main())
    assert seen["codes"] == "['RESOURCE_EXHAUSTED']", seen["codes"]
    assert seen["peak"] - seen["before"] <= 16 * 1024 * 1024, seen
    assert len(replica.seen) == 1  # the warm call: no oversized message reached a replica


def test_metadata_over_the_limit_is_refused() -> None:
    replica = greeter("v1")
    proxy = proxy_with({"v1": [replica]})

    async def test(served: Served) -> None:
        flood = tuple((f"x-h{n}", "v" * 100) for n in range(100))  # ~10 kB of metadata
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await served.unary("SayHello", b"x", metadata=flood)
        assert code_of(refused.value) in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INTERNAL)

    run(proxy, test, GrpcLimits(max_metadata_bytes=4096))
    assert replica.seen == []


def test_before_its_first_route_table_the_port_answers_unavailable() -> None:
    proxy = Proxy(ProxySettings())

    async def test(served: Served) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await served.unary("SayHello", b"x")
        assert code_of(refused.value) == grpc.StatusCode.UNAVAILABLE

    run(proxy, test)
