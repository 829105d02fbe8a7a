"""The s3:// capture sink against an S3-compatible server on 127.0.0.1 (moto's, as
the models' tests use): records leave in batched JSON Lines objects under the
prefix, with the node's AWS_* variables; a store that cannot be reached drops and
counts the records, and the answers never wait for it."""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any, Iterator

import httpx
import pytest

from proxy.app import ProxyApp
from proxy.observability.capture import CaptureWriter
from proxy.routes.subscriptions import Subscriptions
from proxy.settings import ProxySettings
from tests.support.capture import Counts
from tests.support.moto_s3 import loopback_s3
from tests.support.proxy_app import FakeCaller, FakeReplica, replica_set
from vocabulary.control.longpoll import RouteEntry, RouteTable
from vocabulary.request_path.wire import WireRequest, WireResponse
from vocabulary.spec.endpoints import CaptureConfig, EndpointConfig


@pytest.fixture()
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with loopback_s3(monkeypatch, "audit") as client:
        yield client


async def _answer(request: WireRequest) -> WireResponse:
    return 200, [(b"content-type", b"application/json")], b'{"ok": true}'


def _app(writer: CaptureWriter, sink: str) -> ProxyApp:
    rng = random.Random(0)
    app = ProxyApp(FakeCaller(), ProxySettings(), rng, capture=writer)
    config = EndpointConfig(name="login", route="/login", traffic={"v1": 1.0}, capture=CaptureConfig(
        sample=1.0, sink=sink, redact=("json:$.password",)))
    app.install(Subscriptions(ProxySettings(), rng).apply({
        "routes": (1, RouteTable(entries=(RouteEntry(route="/login", methods=("POST",), endpoint="login"),))),
        "endpoint:login": (2, config),
        "replicas:v1": (3, replica_set("v1", [FakeReplica("r1", _answer)]).model_copy(update={"commit": "c0ffee"})),
    }))
    return app


async def _post_many(app: ProxyApp, n: int) -> list[int]:
    body = json.dumps({"user": "ada", "password": "planted-s3-secret"}).encode()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
        return [(await client.post("/login", content=body, headers={"authorization": "Bearer planted"})).status_code
                for _ in range(n)]


def test_records_leave_in_batched_objects_under_the_prefix_with_the_commit_and_no_secret(s3: Any) -> None:
    counts = Counts()
    writer = CaptureWriter("node1:0", random.Random(0), counts)
    app = _app(writer, "s3://audit/capture/login")
    assert asyncio.run(_post_many(app, 5)) == [200] * 5
    writer.close()  # a stopping writer sends what it holds
    listed = s3.list_objects_v2(Bucket="audit", Prefix="capture/login/")["Contents"]
    assert 1 <= len(listed) < 5  # batched: fewer objects than records
    assert all(o["Key"].startswith("capture/login/node1_0-") and o["Key"].endswith(".jsonl") for o in listed)
    text = "".join(s3.get_object(Bucket="audit", Key=o["Key"])["Body"].read().decode() for o in listed)
    records = [json.loads(line) for line in text.splitlines()]
    assert len(records) == 5 and {r["commit"] for r in records} == {"c0ffee"}
    assert "planted" not in text
    assert counts.results == ["written"] * 5


def test_a_store_that_cannot_be_reached_drops_and_counts_and_answers_never_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens (discard port)
    counts = Counts()
    writer = CaptureWriter("node1:0", random.Random(0), counts)
    app = _app(writer, "s3://audit/capture")
    started = time.perf_counter()
    assert asyncio.run(_post_many(app, 3)) == [200] * 3
    assert time.perf_counter() - started < 2.0  # the answers went out without the store
    writer.close(timeout_s=30.0)
    assert counts.results == ["dropped"] * 3


def test_an_s3_sink_needs_a_bucket() -> None:
    with pytest.raises(ValueError, match="s3://BUCKET/PREFIX"):
        CaptureConfig(sink="s3:///no-bucket")
