"""Capture beyond whole answers, in-process with fake replicas and a real capture
writer on a tmp directory: a streamed answer's record (its status, chunks and
bytes counted, the body's start kept up to max_body_bytes), a WebSocket's
(messages and bytes each way, the first ones kept and redacted), and shadow
copies' answers and verdicts in their primary's record (paths, never values)."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import httpx

from proxy.app import ProxyApp
from proxy.observability.capture import CaptureWriter
from proxy.routes.subscriptions import Subscriptions
from proxy.settings import ProxySettings
from tests.support.proxy_app import FakeCaller, FakeReplica, replica_set
from tests.support.streams import Client as StreamClient
from tests.support.streams import StreamingCaller, StreamingReplica
from tests.support.websockets import Client as SocketClient
from tests.support.websockets import EchoReplica, SocketCaller
from vocabulary.control.longpoll import ReplicaInfo, ReplicaSet, RouteEntry, RouteTable
from vocabulary.request_path.wire import WireRequest, WireResponse
from vocabulary.spec.endpoints import CaptureConfig, EndpointConfig


def _capture(tmp_path: Path, **settings: Any) -> CaptureConfig:
    return CaptureConfig(**{"sample": 1.0, "sink": f"file://{tmp_path}/sink", **settings})


def _records(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted((tmp_path / "sink").glob("*.jsonl"))
            for line in path.read_text().splitlines()]


def _app(caller: Any, writer: CaptureWriter, config: EndpointConfig, replicas: dict[str, Any]) -> ProxyApp:
    rng = random.Random(0)
    app = ProxyApp(caller, ProxySettings(), rng, capture=writer)
    answer: dict[str, Any] = {
        "routes": (1, RouteTable(entries=(RouteEntry(route=config.route, methods=("GET", "POST"),
                                                     endpoint=config.name),))),
        f"endpoint:{config.name}": (2, config),
    }
    for n, (name, replica) in enumerate(replicas.items()):
        info = ReplicaInfo(replica_id=f"{name}-r", actor_name=name, handle=replica)
        answer[f"replicas:{name}"] = (3 + n, ReplicaSet(backend=name, max_concurrent_queries=10, replicas=(info,),
                                                        commit="c0ffee"))
    app.install(Subscriptions(ProxySettings(), rng).apply(answer))
    return app


def test_a_streamed_answer_is_recorded_with_its_chunks_and_bytes_and_its_start_cut(tmp_path: Path) -> None:
    writer = CaptureWriter("node1:0", random.Random(0))
    config = EndpointConfig(name="e", route="/e", traffic={"v1": 1.0}, capture=_capture(tmp_path, max_body_bytes=8))
    app = _app(StreamingCaller(), writer, config, {"v1": StreamingReplica([b"aaaa;", b"bbbb;", b"cccc;"])})
    client = StreamClient()
    scope = {"type": "http", "method": "GET", "path": "/e", "raw_path": b"/e", "query_string": b"",
             "headers": [(b"authorization", b"Bearer planted-secret")], "http_version": "1.1"}
    asyncio.run(app(scope, client.receive, client.send))
    assert client.body() == b"first;aaaa;bbbb;cccc;"  # the client gets it all
    writer.close()
    (record,) = _records(tmp_path)
    assert (record["kind"], record["status"], record["commit"], record["replica"]) == ("stream", 200, "c0ffee", "v1-r")
    assert record["stream"] == {"chunks": 4, "bytes": 21}
    assert record["response"]["body"] == {"text": "first;aa", "bytes": 21, "truncated": True}
    # Headers are kept up to max_body_bytes too: 8 bytes hold none of them, and the record says so.
    assert record["request"]["headers"] == [] and record["request"]["headers_cut"] == {"headers": 1, "bytes": 34}
    assert "planted-secret" not in json.dumps(record)


def test_a_stream_cut_by_its_replica_is_recorded_with_the_status_it_is_counted_as(tmp_path: Path) -> None:
    writer = CaptureWriter("node1:0", random.Random(0))
    config = EndpointConfig(name="e", route="/e", traffic={"v1": 1.0}, capture=_capture(tmp_path))
    app = _app(StreamingCaller(), writer, config, {"v1": StreamingReplica([b"a;", b"b;"], dies_after=1)})
    client = StreamClient()
    scope = {"type": "http", "method": "GET", "path": "/e", "raw_path": b"/e", "query_string": b"",
             "headers": [], "http_version": "1.1"}
    asyncio.run(app(scope, client.receive, client.send))
    writer.close()
    (record,) = _records(tmp_path)
    assert (record["status"], record["stream"]) == (502, {"chunks": 2, "bytes": 8})


def test_a_websocket_is_recorded_with_its_messages_each_way_redacted_and_cut(tmp_path: Path) -> None:
    writer = CaptureWriter("node1:0", random.Random(0))
    capture = _capture(tmp_path, max_body_bytes=60, redact=("json:$.password",))
    config = EndpointConfig(name="chat", route="/chat", traffic={"v1": 1.0}, capture=capture, rollout_step=2)
    replica = EchoReplica()
    app = _app(SocketCaller(), writer, config, {"v1": replica})
    first = json.dumps({"user": "ada", "password": "planted-ws-secret"})
    script = [{"type": "websocket.receive", "text": first}, {"type": "websocket.receive", "text": "x" * 50},
              {"type": "websocket.disconnect", "code": 1000}]
    client = SocketClient(script, echoes=2)
    scope = {"type": "websocket", "path": "/chat", "raw_path": b"/chat", "query_string": b"",
             "headers": [(b"sec-websocket-key", b"k"), (b"cookie", b"planted-cookie")]}
    asyncio.run(asyncio.wait_for(app(scope, client.receive, client.send), 5))
    writer.close()
    (record,) = _records(tmp_path)
    assert (record["kind"], record["status"], record["commit"], record["rollout_step"]) == ("websocket", 101, "c0ffee", 2)
    sent, echoed = record["websocket"]["client"], record["websocket"]["app"]
    assert (sent["messages"], sent["bytes"]) == (2, len(first) + 50)
    assert (echoed["messages"], echoed["bytes"]) == (2, len(first) + 50 + 12)
    kept = json.loads(sent["first"][0]["text"])
    assert kept == {"user": "ada", "password": "[redacted]"}
    # The budget is spent on the first message: what is left of the second is cut, and, not being JSON, withheld.
    assert len(sent["first"]) == 2 and sent["first"][1]["truncated"] and "withheld" in sent["first"][1]
    text = json.dumps(record)
    assert "planted-ws-secret" not in text and "planted-cookie" not in text


def test_shadow_answers_and_verdicts_ride_in_their_primary_s_record_without_values(tmp_path: Path) -> None:
    async def primary(request: WireRequest) -> WireResponse:
        return 200, [(b"content-type", b"application/json")], b'{"a": 1, "pin": "planted-pin-1"}'

    async def shadow(request: WireRequest) -> WireResponse:
        await asyncio.sleep(0.05)  # the primary's record waits for it
        return 200, [(b"content-type", b"application/json")], b'{"a": 2, "pin": "planted-pin-2"}'

    writer = CaptureWriter("node1:0", random.Random(0))
    config = EndpointConfig(
        name="e", route="/e", traffic={"v1": 1.0}, shadow={"v2": 1.0}, shadow_compare="json", shadow_values=True,
        capture=_capture(tmp_path, redact=("json:$.pin",)),
    )
    rng = random.Random(0)
    app = ProxyApp(FakeCaller(), ProxySettings(), rng, capture=writer)
    app.install(Subscriptions(ProxySettings(), rng).apply({
        "routes": (1, RouteTable(entries=(RouteEntry(route="/e", methods=("GET",), endpoint="e"),))),
        "endpoint:e": (2, config),
        "replicas:v1": (3, replica_set("v1", [FakeReplica("p", primary)]).model_copy(update={"commit": "c0ffee"})),
        "replicas:v2": (4, replica_set("v2", [FakeReplica("s", shadow)]).model_copy(update={"commit": "beef"})),
    }))

    async def scenario() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
            assert (await client.get("/e")).status_code == 200
        await asyncio.sleep(0.3)  # the shadow copy answers after the client got the primary's answer

    asyncio.run(scenario())
    writer.close()
    (record,) = _records(tmp_path)
    (copy,) = record["shadows"]
    assert (copy["backend"], copy["result"], copy["status"]) == ("v2", "ok", 200)
    assert json.loads(copy["body"]["text"]) == {"a": 2, "pin": "[redacted]"}
    assert copy["compared"]["matched"] is False and "$.a" in copy["compared"]["diff"]
    text = json.dumps(record)
    assert "planted-pin" not in text
    assert "2" not in copy["compared"]["diff"].replace("$.a", "")  # paths and types, never values
