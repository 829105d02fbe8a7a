"""A large answer through an endpoint that captures and shadows every request is never joined or
copied whole on the proxy: the client is sent the very objects the replica answered with, and
capture and the shadow comparison read those same objects through their view
(`proxy.observability.bodies.BodyView`). In-process, with fake replicas and a real capture writer."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

from proxy.app import NullRecorder, ProxyApp
from proxy.observability.capture import CaptureWriter
from proxy.observability.redacting import Exchange
from proxy.routes.subscriptions import Subscriptions
from proxy.settings import ProxySettings
from tests.support.proxy_app import FakeCaller, FakeReplica
from tests.support.streams import Client, StreamingCaller, StreamingReplica, scope
from vocabulary.control.longpoll import ReplicaInfo, ReplicaSet, RouteEntry, RouteTable
from vocabulary.request_path.wire import WireRequest, WireResponse
from vocabulary.spec.endpoints import CaptureConfig, EndpointConfig

MIB = 1024 * 1024


class Offered(CaptureWriter):
    """A capture writer that notes what each record held when it was offered (before it is cut)."""

    def __init__(self) -> None:
        super().__init__("node1:0", random.Random(0))
        self.bodies: list[tuple[bytes, ...]] = []

    def offer(self, exchange: Exchange) -> None:
        self.bodies.append(exchange.response_body.pieces)
        super().offer(exchange)


class Compared(NullRecorder):
    """A recorder of the shadow comparisons."""

    def __init__(self) -> None:
        self.verdicts: list[bool] = []

    def shadow_compared(self, endpoint: str, backend: str, matched: bool) -> None:
        self.verdicts.append(matched)


def _app(caller: Any, writer: CaptureWriter, recorder: Any, primary: Any, shadow: Any, tmp_path: Path) -> ProxyApp:
    config = EndpointConfig(
        name="e", route="/e", traffic={"v1": 1.0}, shadow={"v2": 1.0}, shadow_compare="exact",
        capture=CaptureConfig(sample=1.0, sink=f"file://{tmp_path}/sink"),
    )
    rng = random.Random(0)
    app = ProxyApp(caller, ProxySettings(), rng, recorder=recorder, capture=writer)
    app.install(Subscriptions(ProxySettings(), rng).apply({
        "routes": (1, RouteTable(entries=(RouteEntry(route="/e", methods=("GET",), endpoint="e"),))),
        "endpoint:e": (2, config),
        **{f"replicas:{name}": (3 + n, ReplicaSet(
            backend=name, max_concurrent_queries=10,
            replicas=(ReplicaInfo(replica_id=f"{name}-r", actor_name=name, handle=replica),),
        )) for n, (name, replica) in enumerate((("v1", primary), ("v2", shadow)))},
    }))
    return app


def _records(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted((tmp_path / "sink").glob("*.jsonl"))
            for line in path.read_text().splitlines()]


def test_a_16_mib_answer_captured_and_shadowed_reaches_client_capture_and_comparison_as_the_one_object(
    tmp_path: Path,
) -> None:
    answer = b"a" * (16 * MIB)
    twin = bytes(bytearray(answer))  # equal bytes, another object: the comparison must read both

    async def primary(request: WireRequest) -> WireResponse:
        return 200, [(b"content-type", b"application/octet-stream")], answer

    async def shadow(request: WireRequest) -> WireResponse:
        return 200, [(b"content-type", b"application/octet-stream")], twin

    writer, recorder = Offered(), Compared()
    app = _app(FakeCaller(), writer, recorder, FakeReplica("p", primary), FakeReplica("s", shadow), tmp_path)
    client = Client()

    async def scenario() -> None:
        await app(scope(), client.receive, client.send)
        for _ in range(100):
            if recorder.verdicts and writer.bodies:
                break
            await asyncio.sleep(0.01)

    asyncio.run(scenario())
    writer.close()
    (sent,) = [m["body"] for m in client.sent if m["type"] == "http.response.body"]
    assert sent is answer  # the client was sent the replica's object itself
    assert len(writer.bodies) == 1 and writer.bodies[0][0] is answer  # the record read it, uncopied
    assert recorder.verdicts == [True]  # compared byte for byte with the shadow's, equal
    (record,) = _records(tmp_path)
    assert record["response"]["body"]["bytes"] == 16 * MIB and record["response"]["body"]["truncated"]


def test_a_16_mib_stream_captured_and_shadowed_goes_out_as_the_chunks_the_replica_sent(tmp_path: Path) -> None:
    chunks = [bytes([n]) * (256 * 1024) for n in range(64)]  # 16 MiB in 64 chunks
    writer = Offered()
    replica = StreamingReplica(chunks)
    app = _app(StreamingCaller(), writer, Compared(), replica, StreamingReplica([]), tmp_path)
    client = Client()

    async def scenario() -> None:
        await app(scope(), client.receive, client.send)
        await asyncio.sleep(0.05)  # the shadow copy's stream is discarded, never compared

    asyncio.run(scenario())
    writer.close()
    bodies = [m["body"] for m in client.sent if m["type"] == "http.response.body"]
    assert bodies[0] == b"first;" and bodies[-1] == b""
    relayed = bodies[1:-1]
    assert len(relayed) == len(chunks) and all(out is chunk for out, chunk in zip(relayed, chunks))
    (record,) = _records(tmp_path)
    assert record["stream"] == {"chunks": 65, "bytes": 6 + 16 * MIB}
    limit = CaptureConfig(sink="file:///x").max_body_bytes
    assert record["response"]["body"]["truncated"] and len(record["response"]["body"]["text"]) == limit
