"""Capture end to end: a real controller, proxy and replica (the shipped echo) with
`[capture]` on its endpoint write redacted records to a file sink on this node,
and `gitops capture grep` finds them by commit. Through the same Ray-hosted proxy:
an `s3://` sink sends batched objects to an S3-compatible server on loopback
(moto's, `tests.support.s3`, with the models' credentials); mid-rollout, records and
the proxy's span (exported to a loopback OTLP receiver) say the step the
controller serves; a comparing shadow's answer and verdict ride in its primary's
record. One controller, proxy and OTLP receiver for the module."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from tests.support.examples import ShippedExamples, serve_shipped_examples
from tests.support.otlp import OtlpReceiver, ReceivedSpan
from tests.support.s3 import s3_server
from tests.support.stack import eventually, met, run
from vocabulary.spec.endpoints import CaptureConfig, EndpointConfig, ShadowCompare
from vocabulary.spec.rollout_config import RolloutConfig

pytestmark = pytest.mark.real

SECRETS = ("hunter2-password", "4111-1111-1111-1111", "Bearer tok-xyz", "sk-live-api-key")
# A login with every secret planted: in headers and in JSON body fields.
BODY = json.dumps({"user": "ada", "password": "hunter2-password", "card": {"number": "4111-1111-1111-1111"}})
HEADERS = {"authorization": "Bearer tok-xyz", "x-api-key": "sk-live-api-key", "content-type": "application/json"}
# The echo answers with the request's body as a string: its `body` is redacted too.
RULES = ("header:x-api-key", "json:$.password", "json:$.card.number", "json:$.body")


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    with receiver:
        yield receiver


@pytest.fixture(scope="module")
def served(
    node_env_ray: str, tmp_path_factory: pytest.TempPathFactory, receiver: OtlpReceiver
) -> Iterator[tuple[ShippedExamples, Path]]:
    sink = tmp_path_factory.mktemp("capture")
    code = tmp_path_factory.mktemp("code")
    for examples in serve_shipped_examples(node_env_ray, code, otlp_endpoint=receiver.url):
        examples.backend("echo-v1", "capture-echo", commit="abcdef1234")
        config = examples.state.endpoints["echo"].model_copy(update={
            "name": "capture-echo", "route": "/capture-echo", "traffic": {"capture-echo": 1.0},
            "capture": CaptureConfig(sample=1.0, sink=f"file://{sink}", redact=RULES),
        })
        met(examples.client, run(examples.client.apply_endpoint(config)))
        yield examples, sink


def _records(sink: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sink.glob("*.jsonl") for line in path.read_text().splitlines()]


def test_records_carry_the_commit_and_no_planted_secret(served: tuple[ShippedExamples, Path]) -> None:
    examples, sink = served
    for _ in range(3):
        response = httpx.post(examples.url + "/capture-echo", content=BODY, headers=HEADERS, timeout=30)
        assert response.status_code == 200 and "hunter2-password" in response.text  # the client's answer is whole
    deadline = time.monotonic() + 30
    while len([r for r in _records(sink) if r["endpoint"] == "capture-echo"]) < 3:
        assert time.monotonic() < deadline, f"records: {_records(sink)}"
        time.sleep(0.2)
    text = "".join(path.read_text() for path in sink.glob("*.jsonl"))
    for secret in SECRETS:
        assert secret not in text, secret
    records = [r for r in _records(sink) if r["endpoint"] == "capture-echo"]
    assert len(records) == 3 and all(r["commit"] == "abcdef1234" for r in records)
    assert all(r["backend"] == "capture-echo" and r["replica"] and r["status"] == 200 for r in records)
    request = json.loads(records[0]["request"]["body"]["text"])
    assert request == {"user": "ada", "password": "[redacted]", "card": {"number": "[redacted]"}}

    found = subprocess.run(
        [sys.executable, "-m", "gitops", "capture", "grep", "--commit", "abcdef12", "--sink", f"file://{sink}"],
        capture_output=True, text=True, timeout=60, check=True,
    )
    assert len(found.stdout.splitlines()) == len(records)  # the ticker's commit is another


def test_a_streamed_answer_is_recorded_with_its_chunks_its_bytes_and_its_start(
    served: tuple[ShippedExamples, Path],
) -> None:
    examples, sink = served
    examples.backend("ticker", "capture-ticker", commit="5eed5eed99")
    config = examples.state.endpoints["ticker"].model_copy(update={
        "name": "capture-ticker", "route": "/capture-ticker", "traffic": {"capture-ticker": 1.0},
        "capture": CaptureConfig(sample=1.0, sink=f"file://{sink}", max_body_bytes=16),
    })
    met(examples.client, run(examples.client.apply_endpoint(config)))
    response = httpx.get(examples.url + "/capture-ticker?count=4&interval_s=0.05", timeout=30)
    assert response.status_code == 200 and response.text.count("data: ") == 4

    def streamed() -> list[dict[str, Any]]:
        return [r for r in _records(sink) if r["endpoint"] == "capture-ticker"]

    deadline = time.monotonic() + 30
    while not streamed():
        assert time.monotonic() < deadline, f"records: {_records(sink)}"
        time.sleep(0.2)
    (record,) = streamed()
    assert (record["kind"], record["status"], record["commit"]) == ("stream", 200, "5eed5eed99")
    assert record["stream"]["bytes"] == len(response.content) and record["stream"]["chunks"] >= 2
    assert record["response"]["body"] == {"text": response.text[:16], "bytes": len(response.content), "truncated": True}


def test_a_websocket_session_is_recorded_with_its_messages_each_way(served: tuple[ShippedExamples, Path]) -> None:
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    examples, sink = served
    examples.backend("notes", "capture-notes", commit="0dd5e55101")
    config = examples.state.endpoints["notes"].model_copy(update={
        "name": "capture-notes", "route": "/capture-notes", "traffic": {"capture-notes": 1.0},
        "capture": CaptureConfig(sample=1.0, sink=f"file://{sink}"),
    })
    met(examples.client, run(examples.client.apply_endpoint(config)))
    url = examples.url.replace("http://", "ws://") + "/capture-notes/chat"
    with connect(url, open_timeout=10, additional_headers={"cookie": "session=planted-ws-cookie"}) as socket:
        greeting = socket.recv(timeout=10)
        socket.send("one")
        assert socket.recv(timeout=10) == "echo: one"
        socket.send("bye")
        with pytest.raises(ConnectionClosed):
            socket.recv(timeout=10)

    def sessions() -> list[dict[str, Any]]:
        return [r for r in _records(sink) if r["endpoint"] == "capture-notes"]

    deadline = time.monotonic() + 30
    while not sessions():
        assert time.monotonic() < deadline, f"records: {_records(sink)}"
        time.sleep(0.2)
    (record,) = sessions()
    assert (record["kind"], record["status"], record["commit"]) == ("websocket", 101, "0dd5e55101")
    client, app = record["websocket"]["client"], record["websocket"]["app"]
    assert (client["messages"], client["bytes"]) == (2, len("one") + len("bye"))
    assert [m["text"] for m in client["first"]] == ["one", "bye"]
    assert (app["messages"], app["bytes"]) == (2, len(greeting) + len("echo: one"))
    assert "planted-ws-cookie" not in json.dumps(record)


def _planted_login(url: str, traceparent: str | None = None) -> httpx.Response:
    headers = HEADERS if traceparent is None else {**HEADERS, "traceparent": traceparent}
    response = httpx.post(url, content=BODY, headers=headers, timeout=30)
    assert response.status_code == 200 and "hunter2-password" in response.text  # the client's answer is whole
    return response


def _capture_endpoint(examples: ShippedExamples, name: str, sink: str, **fields: Any) -> EndpointConfig:
    """The shipped echo endpoint as `name` on `/name`, all of its requests captured to `sink` with RULES."""
    config = examples.state.endpoints["echo"].model_copy(update={
        "name": name, "route": f"/{name}", "traffic": {"capture-echo": 1.0},
        "capture": CaptureConfig(sample=1.0, sink=sink, redact=RULES), **fields,
    })
    met(examples.client, run(examples.client.apply_endpoint(config)))
    return config


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    with s3_server("audit") as client:
        yield client


def test_an_s3_sink_gets_batched_objects_under_its_prefix_with_the_commit_and_no_planted_secret(
    served: tuple[ShippedExamples, Path], s3: Any
) -> None:
    examples, sink = served
    _capture_endpoint(examples, "capture-s3", "s3://audit/capture/echo")
    for _ in range(5):
        _planted_login(examples.url + "/capture-s3")

    def sent() -> list[tuple[str, str]]:
        listed = s3.list_objects_v2(Bucket="audit", Prefix="capture/echo/").get("Contents", [])
        return [(o["Key"], s3.get_object(Bucket="audit", Key=o["Key"])["Body"].read().decode()) for o in listed]

    def all_five() -> list[tuple[str, str]]:
        found = sent()
        return found if sum(text.count("\n") for _, text in found) >= 5 else []

    # An object leaves once its oldest record waited 10 s (docs/guides/observability.md).
    objects = eventually(all_five, 40, 0.5, what="5 records in S3")
    assert 1 <= len(objects) < 5, [key for key, _ in objects]  # batched: fewer objects than records
    for key, _ in objects:
        assert re.fullmatch(r"capture/echo/[A-Za-z0-9_-]+-\d{8}T\d{6}-\d+\.jsonl", key), key
    text = "".join(t for _, t in objects)
    for secret in SECRETS:
        assert secret not in text, secret
    records = [json.loads(line) for line in text.splitlines()]
    assert len(records) == 5
    assert {(r["endpoint"], r["backend"], r["commit"], r["status"]) for r in records} == {
        ("capture-s3", "capture-echo", "abcdef1234", 200)
    }
    assert all(r["replica"] for r in records)
    request = records[0]["request"]
    assert json.loads(request["body"]["text"]) == {"user": "ada", "password": "[redacted]", "card": {"number": "[redacted]"}}
    assert {name: value for name, value in request["headers"] if name in ("authorization", "x-api-key")} == {
        "authorization": "[redacted]", "x-api-key": "[redacted]"
    }
    assert json.loads(records[0]["response"]["body"]["text"])["body"] == "[redacted]"
    assert not [r for r in _records(sink) if r["endpoint"] == "capture-s3"]  # the S3 sink's records went to S3 only


@pytest.fixture(scope="module")
def canary(served: tuple[ShippedExamples, Path]) -> str:
    """A second echo backend ("v2" in its answers), the rollout's target and the shadow."""
    examples, _ = served
    examples.backend("echo-v2", "capture-echo-v2", commit="5ca1ab1e22")
    return "capture-echo-v2"


def _traceparent(n: int) -> tuple[str, str]:
    trace_id = f"{n:032x}"
    return trace_id, f"00-{trace_id}-00f067aa0ba902b7-01"


def _proxy_spans(receiver: OtlpReceiver, trace_ids: set[str]) -> dict[str, ReceivedSpan]:
    def found() -> dict[str, ReceivedSpan]:
        spans = {s.trace_id: s for s in receiver.spans() if s.trace_id in trace_ids and s.name == "proxy.request"}
        return spans if len(spans) == len(trace_ids) else {}

    return eventually(found, 30, 0.2, what="the proxy's spans")


def test_mid_rollout_records_and_the_proxy_span_carry_the_step_the_controller_serves(
    served: tuple[ShippedExamples, Path], canary: str, receiver: OtlpReceiver
) -> None:
    examples, sink = served
    steps = RolloutConfig(steps=(0.5, 1.0), step_interval_s=3600, min_requests=1000)  # holds at step 1
    config = _capture_endpoint(examples, "capture-rollout", f"file://{sink}", rollout=steps)
    url = examples.url + "/capture-rollout"
    before, header = _traceparent(1)
    _planted_login(url, header)
    met(examples.client, run(examples.client.apply_endpoint(config.model_copy(update={"traffic": {canary: 1.0}}))))
    rollout = run(examples.client.get_status()).rollouts["capture-rollout"]
    assert rollout.display_step() == 1 and rollout.weights() == {"capture-echo": 0.5, canary: 0.5}, rollout
    # Step 1's weights reach the proxy by long poll: once the canary answers, the proxy serves them.
    # The requests from the canary's first answer on, until both backends answered.
    versions: dict[str, str] = {}
    during: dict[str, str] = {}
    for n in range(2, 80):
        trace_id, header = _traceparent(n)
        versions[trace_id] = _planted_login(url, header).json()["version"]
        if during or versions[trace_id] == "v2":
            during[trace_id] = versions[trace_id]
        if set(during.values()) == {"v1", "v2"} and len(during) >= 3:
            break
    assert set(during.values()) == {"v1", "v2"}, versions

    def records() -> dict[str, dict[str, Any]]:
        found = {r["trace_id"]: r for r in _records(sink) if r["endpoint"] == "capture-rollout"}
        return found if len(found) == 1 + len(versions) else {}

    captured = eventually(records, 30, 0.2, what="a record of each request")
    assert (captured[before]["rollout_step"], captured[before]["backend"]) == (0, "capture-echo")  # no rollout ran
    for trace_id, version in during.items():
        record = captured[trace_id]
        expected = ("capture-echo-v2", "5ca1ab1e22") if version == "v2" else ("capture-echo", "abcdef1234")
        assert (record["rollout_step"], record["backend"], record["commit"]) == (1, *expected), record
    spans = _proxy_spans(receiver, {*during, before})
    assert (spans[before].attributes["gitops.rollout_step"], spans[before].attributes["gitops.backend"]) == (
        0, "capture-echo")
    for trace_id in during:
        attributes = spans[trace_id].attributes
        assert attributes["gitops.endpoint"] == "capture-rollout"
        assert attributes["gitops.rollout_step"] == 1, attributes
        assert (attributes["gitops.backend"], attributes["gitops.commit"]) == (
            captured[trace_id]["backend"], captured[trace_id]["commit"])
    met(examples.client, run(examples.client.delete_endpoint("capture-rollout")))  # no rollout left ticking


def test_a_comparing_shadow_s_answer_and_verdict_ride_in_its_primary_s_record(
    served: tuple[ShippedExamples, Path], canary: str
) -> None:
    examples, sink = served
    # The two echoes answer alike but for their `version` (and greeting, left out of the comparison).
    _capture_endpoint(examples, "capture-shadow", f"file://{sink}", shadow={canary: 1.0},
                      shadow_compare=ShadowCompare.JSON, shadow_ignore=("greeting",))
    trace_id, header = _traceparent(1000)
    response = _planted_login(examples.url + "/capture-shadow", header)
    assert response.json()["version"] == "v1"  # the client gets the primary's answer

    def records() -> list[dict[str, Any]]:
        return [r for r in _records(sink) if r["endpoint"] == "capture-shadow"]

    (record,) = eventually(records, 30, 0.2, what="the primary's record")
    time.sleep(0.5)
    assert len(records()) == 1  # one record, the shadow's answer in it: none of its own
    text = json.dumps(record)
    for secret in SECRETS:
        assert secret not in text, secret
    assert (record["trace_id"], record["backend"], record["commit"], record["status"]) == (
        trace_id, "capture-echo", "abcdef1234", 200)
    (shadow,) = record["shadows"]
    assert (shadow["backend"], shadow["result"], shadow["status"]) == (canary, "ok", 200)
    assert shadow["compared"] == {"matched": False, "diff": "$.version: string values differ"}  # types, no values
    answer = json.loads(shadow["body"]["text"])
    assert (answer["version"], answer["body"]) == ("v2", "[redacted]")  # redacted by the endpoint's rules
    assert json.loads(record["response"]["body"]["text"])["version"] == "v1"
