"""Capture end to end: a real controller, proxy and replica (the shipped echo) with
`[capture]` on its endpoint write redacted records to a file sink on this node,
and `gitops capture grep` finds them by commit."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from tests.real.examples import ShippedExamples, serve_shipped_examples
from tests.real.support import met, run
from vocabulary.configs import CaptureConfig

pytestmark = pytest.mark.real

SECRETS = ("hunter2-password", "4111-1111-1111-1111", "Bearer tok-xyz", "sk-live-api-key")


@pytest.fixture(scope="module")
def served(ray_session: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ShippedExamples, Path]]:
    sink = tmp_path_factory.mktemp("capture")
    for examples in serve_shipped_examples(ray_session, tmp_path_factory.mktemp("code")):
        examples.backend("echo-v1", "capture-echo", commit="abcdef1234")
        config = examples.state.endpoints["echo"].model_copy(update={
            "name": "capture-echo", "route": "/capture-echo", "traffic": {"capture-echo": 1.0},
            # The echo answers with the request's body as a string: its `body` is redacted too.
            "capture": CaptureConfig(sample=1.0, sink=f"file://{sink}", redact=(
                "header:x-api-key", "json:$.password", "json:$.card.number", "json:$.body",
            )),
        })
        met(examples.client, run(examples.client.apply_endpoint(config)))
        yield examples, sink


def _records(sink: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sink.glob("*.jsonl") for line in path.read_text().splitlines()]


def test_records_carry_the_commit_and_no_planted_secret(served: tuple[ShippedExamples, Path]) -> None:
    examples, sink = served
    body = json.dumps({"user": "ada", "password": "hunter2-password", "card": {"number": "4111-1111-1111-1111"}})
    headers = {"authorization": "Bearer tok-xyz", "x-api-key": "sk-live-api-key", "content-type": "application/json"}
    for _ in range(3):
        response = httpx.post(examples.url + "/capture-echo", content=body, headers=headers, timeout=30)
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
