"""Client-streaming and bidirectional gRPC calls through the proxy in-process: grpcio's server with the
proxy's handler, the methods an endpoint lists in `grpc_streaming` relayed over a WebSocket session to
fake replicas running the replica host's session app (`replica.calling.grpc_calls.GrpcMethods.session`),
a real grpcio client on 127.0.0.1 (no Ray); and the replica host giving such a call's session to the method."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncGenerator, AsyncIterator

import grpc
import grpc.aio
import pytest

from replica.calling.grpc_calls import GrpcMethods
from replica.host import Replica
from tests.support.grpc_replicas import GrpcCaller, run_grpc
from tests.support.proxy_app import FakeReplica, Proxy
from vocabulary.request_path import grpc_calls
from vocabulary.request_path.grpc_calls import GrpcAbort, close_for_code, code_for_close, grpc_call
from vocabulary.spec.backends import BackendConfig
from vocabulary.spec.endpoints import EndpointConfig, LimitsConfig

pytestmark = pytest.mark.component

SERVICE = "demo.Greeter"
STREAMING = ("Sum", "Chat", "Refuses", "SayHello", "Plain", "Missing")


class Name:
    """A protobuf message's two methods (generated classes have them)."""

    def __init__(self, text: str) -> None:
        self.text = text

    @classmethod
    def FromString(cls, data: bytes) -> Name:  # noqa: N802 — protobuf's name
        return cls(data.decode())

    def SerializeToString(self) -> bytes:  # noqa: N802
        return self.text.encode()


class Greeter:
    def __init__(self, name: str) -> None:
        self.name = name
        self.seen: list[bytes] = []

    async def Sum(self, requests: AsyncIterator[bytes]) -> bytes:  # noqa: N802 — client streaming
        total = 0
        async for request in requests:
            total += int(request)
        return f"{self.name}: {total}".encode()

    async def Chat(self, requests: AsyncIterator[Name]) -> AsyncGenerator[Name, None]:  # noqa: N802 — bidirectional
        async for request in requests:  # parsed: AsyncIterator of a message class
            yield Name(f"{self.name} heard {request.text}")

    async def Refuses(self, requests: AsyncIterator[bytes]) -> bytes:  # noqa: N802
        async for request in requests:
            raise GrpcAbort(grpc_calls.INVALID_ARGUMENT, f"no {request.decode()} here")
        return b""

    async def Fails(self, requests: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:  # noqa: N802
        yield b"one"
        raise ValueError("the user's code raised")

    def Plain(self, requests: Any) -> bytes:  # noqa: N802 — a plain def cannot take a stream of requests
        return b""

    async def SayHello(self, request: bytes) -> bytes:  # noqa: N802 — unary, when not listed
        return f"{self.name}: hello {request.decode()}".encode()


def greeter(name: str) -> FakeReplica:
    return FakeReplica(name, GrpcMethods(Greeter(name)).call)  # type: ignore[arg-type]


def proxy_with(backends: dict[str, list[FakeReplica]], streaming: tuple[str, ...] = STREAMING, **endpoint: Any) -> Proxy:
    proxy = Proxy()
    proxy.app.caller = proxy.app.sender._caller = GrpcCaller()  # type: ignore[assignment]
    proxy.serve("greet", "/greet", backends, grpc_service=SERVICE, grpc_streaming=streaming + ("Fails",), **endpoint)
    return proxy


async def messages(*items: bytes, pause_s: float = 0.0) -> AsyncGenerator[bytes, None]:
    for item in items:
        await asyncio.sleep(pause_s)
        yield item


def test_a_client_streaming_call_gets_every_request_and_answers_once() -> None:
    replica = greeter("v1")
    proxy = proxy_with({"v1": [replica]})

    async def test(channel: grpc.aio.Channel) -> None:
        sum_ = channel.stream_unary(f"/{SERVICE}/Sum")
        assert await sum_(messages(b"1", b"2", b"39"), metadata=(("x-tenant", "t1"),)) == b"v1: 42"
        assert await sum_(messages()) == b"v1: 0"  # no request at all

    run_grpc(proxy, test)
    assert proxy.recorded.requests == [("greet", "v1", 200), ("greet", "v1", 200)]
    method, path, _, headers, body = replica.seen[0]
    assert (method, path, body) == ("POST", f"/{SERVICE}/Sum", b"") and (b"x-tenant", b"t1") in headers


def test_a_bidirectional_call_answers_each_request_before_the_next_is_sent() -> None:
    proxy = proxy_with({"v1": [greeter("v1")]})

    async def test(channel: grpc.aio.Channel) -> None:
        call = channel.stream_stream(f"/{SERVICE}/Chat")()
        for word in ("ada", "bob", "cy"):  # a ping-pong: each reply read before the next request goes
            await call.write(word.encode())
            assert await call.read() == f"v1 heard {word}".encode()
        await call.done_writing()
        assert await call.read() == grpc.aio.EOF
        assert await call.code() == grpc.StatusCode.OK

    run_grpc(proxy, test)
    assert proxy.recorded.requests == [("greet", "v1", 200)]


def test_refusals_of_streaming_request_calls_are_status_codes() -> None:
    proxy = proxy_with({"v1": [greeter("v1")]})

    async def test(channel: grpc.aio.Channel) -> None:
        for method, code, details in [
            ("Refuses", grpc.StatusCode.INVALID_ARGUMENT, "no ada here"),  # the method's own code
            ("Missing", grpc.StatusCode.UNIMPLEMENTED, "the backend has no gRPC method 'Missing'"),
            ("Plain", grpc.StatusCode.UNIMPLEMENTED, "the gRPC method 'Plain' takes one request"),
            ("SayHello", grpc.StatusCode.UNIMPLEMENTED, "the gRPC method 'SayHello' takes one request"),
            ("Fails", grpc.StatusCode.INTERNAL, "the backend's method raised"),
        ]:
            call = channel.stream_stream(f"/{SERVICE}/{method}")(messages(b"ada"))
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                async for _ in call:
                    pass
            assert refused.value.code() == code, (method, refused.value)
            assert details in (refused.value.details() or ""), (method, refused.value.details())

    run_grpc(proxy, test)
    assert [code for _, _, code in proxy.recorded.requests] == [400, 501, 501, 501, 500]


def test_methods_not_listed_stay_unary_and_server_streaming() -> None:
    proxy = proxy_with({"v1": [greeter("v1")]}, streaming=("Sum",))

    async def test(channel: grpc.aio.Channel) -> None:
        assert await channel.unary_unary(f"/{SERVICE}/SayHello")(b"ada") == b"v1: hello ada"

    run_grpc(proxy, test)


def test_the_deadline_bounds_a_streaming_request_call_and_the_replica_slot_comes_back() -> None:
    proxy = proxy_with({"v1": [greeter("v1")]}, cap=1)

    async def test(channel: grpc.aio.Channel) -> None:
        sum_ = channel.stream_unary(f"/{SERVICE}/Sum")
        with pytest.raises(grpc.aio.AioRpcError) as late:
            await sum_(messages(b"1", b"2", pause_s=1.0), timeout=0.3)  # a client too slow for its deadline
        assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert await sum_(messages(b"5")) == b"v1: 5"  # the one slot is free again

    run_grpc(proxy, test)


class SlowToClose(GrpcCaller):
    """Its sessions take a second to close after they end, as a replica's can while its method winds down."""

    async def open_websocket(
        self, handle: Any, websocket_id: str, request: Any
    ) -> AsyncGenerator[dict[str, Any], None]:
        session = super().open_websocket(handle, websocket_id, request)
        try:
            async for message in session:
                yield message
        finally:
            await session.aclose()
            await asyncio.sleep(1.0)


def test_a_call_cancelled_while_its_session_closes_still_frees_the_replica_slot() -> None:
    """The endpoint's 0.2 s ends the call; its client's 0.6 s deadline then cancels it while the proxy
    closes the replica's session. The one slot must come back all the same (it once did not: every
    later call of the backend waited for a slot until its own deadline)."""
    proxy = proxy_with({"v1": [greeter("v1")]}, cap=1, timeout_s=0.2)
    proxy.app.caller = proxy.app.sender._caller = SlowToClose()  # type: ignore[assignment]

    async def test(channel: grpc.aio.Channel) -> None:
        sum_ = channel.stream_unary(f"/{SERVICE}/Sum")
        with pytest.raises(grpc.aio.AioRpcError) as late:
            await sum_(messages(b"1", b"2", pause_s=2.0), timeout=0.6)
        assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert await sum_(messages(b"5")) == b"v1: 5"

    run_grpc(proxy, test)


def test_a_request_message_over_max_body_bytes_ends_the_call_unsent_and_frees_the_replica_slot() -> None:
    replica = greeter("v1")
    proxy = proxy_with({"v1": [replica]}, max_body_bytes=8, cap=1)

    async def test(channel: grpc.aio.Channel) -> None:
        call = channel.stream_stream(f"/{SERVICE}/Chat")()
        await call.write(b"ada")
        assert await call.read() == b"v1 heard ada"
        await call.write(b"x" * 9)  # one byte over, as a unary call's one message would be refused
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            while await call.read() != grpc.aio.EOF:
                pass
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert refused.value.details() == "a request message of 9 bytes is over the endpoint's max_body_bytes (8)"
        sum_ = channel.stream_unary(f"/{SERVICE}/Sum")
        with pytest.raises(grpc.aio.AioRpcError) as summed:
            await sum_(messages(b"1", b"123456789", b"2"))
        assert summed.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert await sum_(messages(b"12345678", b"1")) == b"v1: 12345679"  # at the bound; the one slot is free

    run_grpc(proxy, test)
    assert [code for _, _, code in proxy.recorded.requests] == [413, 413, 200]


def test_limits_split_and_no_replica_apply_as_for_unary_calls() -> None:
    limits = LimitsConfig(requests_per_s=0.001, burst=1, key="header:x-tenant")
    proxy = proxy_with({"a": [greeter("a")], "b": [greeter("b")]}, traffic={"a": 0.5, "b": 0.5}, limits=limits)

    async def test(channel: grpc.aio.Channel) -> None:
        sum_ = channel.stream_unary(f"/{SERVICE}/Sum")
        seen = {(await sum_(messages(b"1"), metadata=(("x-tenant", f"t{n}"),))).split(b":")[0] for n in range(40)}
        assert seen == {b"a", b"b"}
        with pytest.raises(grpc.aio.AioRpcError) as limited:
            await sum_(messages(b"1"), metadata=(("x-tenant", "t0"),))
        assert limited.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

    run_grpc(proxy, test)
    empty = Proxy()
    empty.app.caller = empty.app.sender._caller = GrpcCaller()  # type: ignore[assignment]
    empty.serve("greet", "/greet", {"v1": []}, grpc_service=SERVICE, grpc_streaming=("Sum",))

    async def no_replica(channel: grpc.aio.Channel) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await channel.stream_unary(f"/{SERVICE}/Sum")(messages(b"1"))
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert ("retry-after", "1") in tuple(refused.value.trailing_metadata() or ())

    run_grpc(empty, no_replica)


def test_close_codes_carry_every_grpc_code_and_method_names_are_identifiers() -> None:
    assert [code_for_close(close_for_code(code)) for code in range(17)] == list(range(17))
    assert code_for_close(1009) == grpc_calls.RESOURCE_EXHAUSTED and code_for_close(1011) == grpc_calls.INTERNAL
    with pytest.raises(ValueError, match="is not a gRPC method's name"):
        EndpointConfig(name="e", route="/e", traffic={"b": 1.0}, grpc_service=SERVICE, grpc_streaming=("a/b",))


def test_the_replica_host_gives_a_streaming_request_call_s_session_to_its_method() -> None:
    config = BackendConfig.model_validate(
        {"name": "greeter", "version": "v1", "import_path": f"{__name__}:Greeter", "init_args": ["h"]})
    replica = Replica(config, "greeter#1")

    async def scenario() -> list[dict[str, Any]]:
        await replica.initialize()
        replies = replica.websocket("s1", grpc_call(f"/{SERVICE}/Chat", [(b"x-tenant", b"t1")], b""))
        seen = [await anext(replies)]
        for word in (b"ada", b"bob"):
            assert await replica.websocket_message("s1", {"type": "websocket.receive", "bytes": word})
            seen.append(await anext(replies))
        assert await replica.websocket_message("s1", {"type": "websocket.disconnect", "code": 1000})
        seen += [message async for message in replies]
        assert not await replica.websocket_message("s1", {"type": "websocket.receive", "bytes": b"late"})
        return seen

    assert asyncio.run(scenario()) == [
        {"type": "websocket.accept"},
        {"type": "websocket.send", "bytes": b"h heard ada"},
        {"type": "websocket.send", "bytes": b"h heard bob"},
        {"type": "websocket.close", "code": 1000},
    ]
