"""Shadows and capture for the proxy's gRPC calls in-process: grpcio's server with the proxy's handler over
fake replicas that run the replica host's gRPC dispatch (`replica.calling.grpc_calls`), a real grpcio
client on 127.0.0.1, and a real capture writer on a tmp directory (no Ray)."""

from __future__ import annotations

import asyncio
import base64
import json
import random
from pathlib import Path
from typing import Any, AsyncGenerator, AsyncIterator

import grpc
import grpc.aio
import pytest

from proxy.app import ProxyApp
from proxy.grpc_ingress import serve_grpc
from proxy.observability.capture import CaptureWriter
from proxy.observability.metrics import ShadowResult
from proxy.settings import GrpcLimits, ProxySettings
from replica.calling.grpc_calls import GrpcMethods
from tests.support.capture import records
from tests.support.grpc_replicas import GrpcCaller
from tests.support.proxy_app import FakeReplica, Proxy
from vocabulary.request_path import grpc_calls
from vocabulary.request_path.grpc_calls import GrpcAbort
from vocabulary.spec.endpoints import CaptureConfig, ShadowCompare

pytestmark = pytest.mark.component

SERVICE = "demo.Greeter"
SECRET = "sk-live-grpc-key"


class Greeter:
    """A backend class whose answers say which backend it is (`name`), or not (`same`)."""

    def __init__(self, name: str, delay_s: float = 0.0, fails: bool = False) -> None:
        self.name, self.delay_s, self.fails = name, delay_s, fails

    async def SayHello(self, request: bytes) -> bytes:  # noqa: N802 — named as the gRPC method
        await asyncio.sleep(self.delay_s)
        if self.fails:
            raise ValueError("the shadow's code raised")
        return f"{self.name}: hello {request.decode()}".encode()

    async def Same(self, request: bytes) -> bytes:  # noqa: N802 — the same answer from every backend
        return b"same " + request

    async def Count(self, request: bytes) -> AsyncGenerator[bytes, None]:  # noqa: N802
        for n in range(int(request)):
            yield f"{self.name} {n}".encode()

    async def Refuses(self, request: bytes) -> bytes:  # noqa: N802
        raise GrpcAbort(grpc_calls.NOT_FOUND, f"no {request.decode()} here")

    async def Echo(self, requests: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:  # noqa: N802 — bidirectional
        async for request in requests:
            yield f"{self.name} heard {request.decode()}".encode()


def greeter(name: str, **behaviour: Any) -> FakeReplica:
    return FakeReplica(name, GrpcMethods(Greeter(name, **behaviour)).call)  # type: ignore[arg-type]


def proxy_with(
    backends: dict[str, list[FakeReplica]], writer: CaptureWriter | None = None, **endpoint: Any
) -> Proxy:
    proxy = Proxy()
    # The replica's dispatch in-process; a capture writer when the test reads records.
    proxy.app = ProxyApp(GrpcCaller(), ProxySettings(), random.Random(0), proxy.recorded, capture=writer)  # type: ignore[arg-type]
    proxy.serve("greet", "/greet", backends, grpc_service=SERVICE, **endpoint)
    return proxy


async def serving(proxy: Proxy, test: Any) -> None:
    server, port = await serve_grpc(proxy.app, "127.0.0.1", 0, GrpcLimits(), shared=False)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            await test(channel)
            # The copies still out answer (or time out) before the test reads what they did.
            await asyncio.gather(*list(proxy.app._shadow_tasks), return_exceptions=True)
    finally:
        await proxy.app.stop_shadows()
        await server.stop(None)


async def unary(channel: grpc.aio.Channel, method: str, request: bytes, **options: Any) -> bytes:
    return await channel.unary_unary(f"/{SERVICE}/{method}")(request, **options)  # type: ignore[no-any-return]


async def streamed(channel: grpc.aio.Channel, method: str, request: bytes) -> list[bytes]:
    return [message async for message in channel.unary_stream(f"/{SERVICE}/{method}")(request)]


# --- shadows -------------------------------------------------------------------------------


def test_a_unary_call_is_copied_to_the_shadow_backend_without_credentials_and_its_reply_is_dropped() -> None:
    shadow = greeter("shadow")
    proxy = proxy_with({"v1": [greeter("primary")], "v3": [shadow]}, shadow={"v3": 1.0})
    metadata = (("x-tenant", "ada"), ("x-api-key", SECRET), ("authorization", "Bearer t"))

    async def test(channel: grpc.aio.Channel) -> None:
        assert await unary(channel, "SayHello", b"ada", metadata=metadata) == b"primary: hello ada"

    asyncio.run(serving(proxy, test))
    assert proxy.recorded.shadows == [("greet", "v3", ShadowResult.OK)]
    ((method, path, _, headers, body),) = shadow.seen
    assert (method, path, body) == ("POST", f"/{SERVICE}/SayHello", b"ada")  # the same call, to the same method
    names = [name for name, _ in headers]
    assert b"x-tenant" in names and b"x-api-key" not in names and b"authorization" not in names
    assert grpc_calls.is_grpc_call(shadow.seen[0])  # still a gRPC call: the replica calls the method
    assert proxy.recorded.requests == [("greet", "v1", 200)]  # the copy is no request of the endpoint


def test_a_failing_or_slow_shadow_never_changes_or_delays_the_primary() -> None:
    proxy = proxy_with({"v1": [greeter("primary")], "v3": [greeter("s", delay_s=5.0)], "v4": [greeter("f", fails=True)]},
                       shadow={"v3": 1.0, "v4": 1.0}, timeout_s=0.5)
    took: list[float] = []

    async def test(channel: grpc.aio.Channel) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await unary(channel, "SayHello", b"x") == b"primary: hello x"
        took.append(loop.time() - started)

    asyncio.run(serving(proxy, test))
    assert took[0] < 0.4, took  # the primary answered long before the slow copy's timeout
    assert sorted(proxy.recorded.shadows) == [("greet", "v3", ShadowResult.TIMEOUT), ("greet", "v4", ShadowResult.ERROR)]


def test_shadow_replies_are_compared_with_the_primary_s_message_and_mismatches_kept() -> None:
    proxy = proxy_with({"v1": [greeter("primary")], "v3": [greeter("shadow")]}, shadow={"v3": 1.0},
                       shadow_compare=ShadowCompare.EXACT)

    async def test(channel: grpc.aio.Channel) -> None:
        assert await unary(channel, "Same", b"x") == b"same x"  # the same message: a match
        assert await unary(channel, "SayHello", b"x") == b"primary: hello x"  # another: a mismatch
        with pytest.raises(grpc.aio.AioRpcError):
            await unary(channel, "Refuses", b"x")  # the same refusal: a match

    asyncio.run(serving(proxy, test))
    stats = proxy.app.endpoint_request_stats()["greet"]
    assert (stats.compared, stats.mismatched) == (3, 1)
    (mismatch,) = proxy.app.mismatches.recent()
    assert (mismatch.path, mismatch.primary_status, mismatch.shadow_status) == (f"/{SERVICE}/SayHello", 200, 200)
    assert mismatch.diff.startswith("bodies differ from byte 0")


def test_a_streamed_call_is_copied_but_never_compared() -> None:
    shadow = greeter("shadow")
    proxy = proxy_with({"v1": [greeter("primary")], "v3": [shadow]}, shadow={"v3": 1.0},
                       shadow_compare=ShadowCompare.EXACT)

    async def test(channel: grpc.aio.Channel) -> None:
        assert await streamed(channel, "Count", b"3") == [b"primary 0", b"primary 1", b"primary 2"]

    asyncio.run(serving(proxy, test))
    assert len(shadow.seen) == 1 and proxy.recorded.shadows == [("greet", "v3", ShadowResult.OK)]
    assert proxy.app.endpoint_request_stats()["greet"].compared == 0


def test_copies_past_max_shadow_in_flight_are_dropped() -> None:
    shadow = greeter("shadow", delay_s=0.3)
    proxy = proxy_with({"v1": [greeter("primary")], "v3": [shadow]}, shadow={"v3": 1.0})
    proxy.app._shadows._max_in_flight = 1

    async def test(channel: grpc.aio.Channel) -> None:
        for _ in range(3):
            assert await unary(channel, "SayHello", b"x") == b"primary: hello x"

    asyncio.run(serving(proxy, test))
    assert len(shadow.seen) == 1
    assert sorted(result for _, _, result in proxy.recorded.shadows) == sorted(
        [ShadowResult.OK, ShadowResult.DROPPED, ShadowResult.DROPPED])


# --- capture ------------------------------------------------------------------------------


def capturing(tmp_path: Path, **capture: Any) -> tuple[CaptureWriter, dict[str, Any]]:
    config = CaptureConfig(**{"sample": 1.0, "sink": f"file://{tmp_path}/sink", **capture})
    return CaptureWriter("node1:0", random.Random(0)), {"capture": config}


def test_a_unary_call_is_recorded_with_its_service_method_code_and_messages_its_secrets_redacted(
    tmp_path: Path,
) -> None:
    writer, endpoint = capturing(tmp_path, redact=["header:x-tenant"])
    proxy = proxy_with({"v1": [greeter("primary")]}, writer, **endpoint)
    metadata = (("x-api-key", SECRET), ("x-tenant", "ada"), ("x-trace-note", "kept"),
                ("x-blob-bin", b"\x00\xff"))

    async def test(channel: grpc.aio.Channel) -> None:
        assert await unary(channel, "SayHello", b"ada", metadata=metadata) == b"primary: hello ada"
        with pytest.raises(grpc.aio.AioRpcError):
            await unary(channel, "Refuses", b"bob")

    asyncio.run(serving(proxy, test))
    writer.close()
    assert SECRET not in (tmp_path / "sink").joinpath(next((tmp_path / "sink").iterdir()).name).read_text()
    ok, refused = records(tmp_path / "sink")
    assert ok["kind"] == "grpc" and ok["status"] == 200 and ok["replica"] == "primary"
    assert ok["grpc"] == {"service": SERVICE, "method": "SayHello", "code": 0, "code_name": "OK"}
    assert ok["request"]["path"] == f"/{SERVICE}/SayHello"
    shown = dict(ok["request"]["headers"])
    assert shown["x-api-key"] == "[redacted]" and shown["x-tenant"] == "[redacted]"  # by pattern; by rule
    assert shown["x-trace-note"] == "kept" and ":grpc" not in shown  # the ingress's marker is no metadata
    assert ok["request"]["body"] == {"bytes": 3, "truncated": False, "text": "ada"}
    assert ok["response"]["body"]["text"] == "primary: hello ada"
    assert dict(ok["response"]["headers"]) == {"grpc-status": "0"}  # the call's trailers
    assert refused["grpc"] == {"service": SERVICE, "method": "Refuses", "code": 5, "code_name": "NOT_FOUND"}
    assert refused["status"] == 404 and refused["response"]["body"]["text"] == "no bob here"


def test_a_binary_message_is_recorded_as_base64_and_cut_at_max_body_bytes(tmp_path: Path) -> None:
    writer, endpoint = capturing(tmp_path, max_body_bytes=16)
    proxy = proxy_with({"v1": [greeter("primary")]}, writer, **endpoint)
    message = bytes(range(255, -1, -1)) * 4  # no UTF-8 (it starts with 0xff), 1 KiB

    async def test(channel: grpc.aio.Channel) -> None:
        await unary(channel, "Same", message)

    asyncio.run(serving(proxy, test))
    writer.close()
    (record,) = records(tmp_path / "sink")
    body = record["request"]["body"]
    assert body["bytes"] == 1024 and body["truncated"] is True
    assert base64.b64decode(body["base64"]) == message[:16]


def test_a_streamed_reply_is_recorded_message_by_message(tmp_path: Path) -> None:
    writer, endpoint = capturing(tmp_path, max_body_bytes=20)
    proxy = proxy_with({"v1": [greeter("primary")]}, writer, **endpoint)

    async def test(channel: grpc.aio.Channel) -> None:
        assert len(await streamed(channel, "Count", b"5")) == 5

    asyncio.run(serving(proxy, test))
    writer.close()
    (record,) = records(tmp_path / "sink")
    assert record["kind"] == "grpc" and record["grpc"]["code"] == 0 and record["request"]["body"]["text"] == "5"
    stream = record["stream"]
    assert (stream["messages"], stream["bytes"]) == (5, 5 * len("primary 0"))
    # The first messages kept up to max_body_bytes: two whole, the third cut.
    assert [first.get("text") for first in stream["first"]] == ["primary 0", "primary 1", "pr"]
    assert stream["first"][2]["truncated"] is True
    assert record["response"]["body"]["bytes"] == 0  # the messages are in `stream`, not one body


def test_a_call_whose_requests_stream_is_recorded_message_by_message_both_ways_and_never_shadowed(
    tmp_path: Path,
) -> None:
    writer, endpoint = capturing(tmp_path, max_body_bytes=12)
    shadow = greeter("shadow")
    proxy = proxy_with({"v1": [greeter("primary")], "v3": [shadow]}, writer, shadow={"v3": 1.0},
                       grpc_streaming=("Echo",), **endpoint)

    async def requests() -> AsyncGenerator[bytes, None]:
        for word in (b"ada", b"bob", b"carmen-lopez"):
            yield word

    async def test(channel: grpc.aio.Channel) -> None:
        call = channel.stream_stream(f"/{SERVICE}/Echo")(requests(), metadata=(("x-api-key", SECRET),))
        assert [reply async for reply in call] == [b"primary heard ada", b"primary heard bob",
                                                   b"primary heard carmen-lopez"]

    asyncio.run(serving(proxy, test))
    writer.close()
    (record,) = records(tmp_path / "sink")
    assert record["kind"] == "grpc" and record["grpc"]["method"] == "Echo" and record["grpc"]["code"] == 0
    assert SECRET not in json.dumps(record)
    assert record["request"]["body"]["bytes"] == 0  # the messages are in `requests`, not one body
    sent = record["requests"]
    assert (sent["messages"], sent["bytes"]) == (3, len(b"adabobcarmen-lopez"))
    # The first messages kept up to max_body_bytes (12): two whole, the third cut at what is left.
    assert [first.get("text") for first in sent["first"]] == ["ada", "bob", "carmen"]
    assert sent["first"][2] == {"bytes": 12, "truncated": True, "text": "carmen"}
    replies = record["stream"]
    assert (replies["messages"], replies["bytes"]) == (3, 17 + 17 + 26)
    assert [first.get("text") for first in replies["first"]] == ["primary hear"]  # 12 bytes: the first, cut
    assert shadow.seen == [] and proxy.recorded.shadows == [] and "shadows" not in record


def test_a_captured_call_s_record_carries_its_shadow_copies_and_their_verdicts(tmp_path: Path) -> None:
    writer, endpoint = capturing(tmp_path)
    proxy = proxy_with({"v1": [greeter("primary")], "v3": [greeter("shadow")]}, writer, shadow={"v3": 1.0},
                       shadow_compare=ShadowCompare.EXACT, **endpoint)

    async def test(channel: grpc.aio.Channel) -> None:
        await unary(channel, "SayHello", b"x", metadata=(("x-api-key", SECRET),))

    asyncio.run(serving(proxy, test))
    writer.close()
    (record,) = records(tmp_path / "sink")
    (shadowed,) = record["shadows"]
    assert (shadowed["backend"], shadowed["result"], shadowed["status"]) == ("v3", "ok", 200)
    assert shadowed["body"]["text"] == "shadow: hello x"
    assert shadowed["compared"]["matched"] is False
