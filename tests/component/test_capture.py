"""Capture in-process: the proxy's ASGI app with a fake replica and a real capture
writer on a tmp directory. Records carry the commit and never a redacted field
(secrets planted in headers and JSON bodies, both ways); a full queue drops and
counts, never waits."""

from __future__ import annotations

import asyncio
import json
import random
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from proxy.app import ProxyApp
from proxy.observability.capture import CaptureWriter
from proxy.observability.redacting import Exchange, Redaction
from tests.support.capture import Counts
from tests.support.capture import capture_app as _app
from tests.support.capture import records as _records
from vocabulary.spec.endpoints import CaptureConfig

SECRETS = ("hunter2-password", "4111-1111-1111-1111", "sk-live-api-key", "Bearer tok-xyz", "session=abc123",
           "resp-token-42", "nested-list-secret")
async def _post(app: ProxyApp, body: bytes, headers: dict[str, str] | None = None) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
        return await client.post("/login", content=body, headers=headers)


def test_records_carry_the_commit_and_never_a_redacted_field(tmp_path: Path) -> None:
    counts = Counts()
    writer = CaptureWriter("node1:0", random.Random(0), counts)
    app = _app(tmp_path, writer)
    body = json.dumps({
        "name": "ada", "password": "hunter2-password", "card": {"number": "4111-1111-1111-1111", "exp": "12/30"},
        "items": [{"secret": "nested-list-secret", "n": 1}, {"n": 2}],
    }).encode()
    headers = {"authorization": "Bearer tok-xyz", "x-api-key": "sk-live-api-key", "cookie": "session=abc123",
               "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    response = asyncio.run(_post(app, body, headers))
    assert response.status_code == 200 and response.json()["token"] == "resp-token-42"  # the client gets it all
    writer.close()
    assert counts.results == ["written"]
    (path,) = (tmp_path / "sink").glob("*.jsonl")
    assert path.name.startswith("node1_0-") and path.name.endswith(".jsonl")
    text = path.read_text()
    for secret in SECRETS:
        assert secret not in text, secret
    (record,) = _records(tmp_path / "sink")
    assert (record["endpoint"], record["backend"], record["replica"], record["commit"]) == ("login", "v1", "r1", "c0ffee")
    assert record["rollout_step"] == 0  # no rollout runs
    assert record["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert record["status"] == 200 and record["latency_ms"] >= 0
    request = json.loads(record["request"]["body"]["text"])
    assert request["password"] == "[redacted]" and request["card"] == {"number": "[redacted]", "exp": "12/30"}
    assert request["items"] == [{"secret": "[redacted]", "n": 1}, {"n": 2}] and request["name"] == "ada"
    assert dict(record["request"]["headers"])["x-api-key"] == "[redacted]"
    assert dict(record["request"]["headers"])["authorization"] == "[redacted]"
    assert json.loads(record["response"]["body"]["text"])["token"] == "[redacted]"
    assert dict(record["response"]["headers"])["set-cookie"] == "[redacted]"


def test_a_record_says_which_rollout_step_s_weights_chose_the_backend(tmp_path: Path) -> None:
    writer = CaptureWriter("node1:0", random.Random(0))
    app = _app(tmp_path, writer, rollout_step=3)  # the controller serves step 3's weights
    assert asyncio.run(_post(app, b"{}")).status_code == 200
    writer.close()
    (record,) = _records(tmp_path / "sink")
    assert record["rollout_step"] == 3


def test_a_body_that_is_not_json_is_withheld_when_json_keys_are_redacted_and_bodies_are_cut(tmp_path: Path) -> None:
    writer = CaptureWriter("w", random.Random(0))
    app = _app(tmp_path, writer, max_body_bytes=8)
    asyncio.run(_post(app, b"password=hunter2-password"))
    writer.close()
    (record,) = _records(tmp_path / "sink")
    assert "hunter2" not in json.dumps(record)
    assert record["request"]["body"]["withheld"]
    assert record["response"]["body"]["truncated"] is True and len(record["response"]["body"]["text"]) == 8


def test_sample_zero_records_nothing(tmp_path: Path) -> None:
    writer = CaptureWriter("w", random.Random(0))
    app = _app(tmp_path, writer, sample=0.0)
    for _ in range(10):
        asyncio.run(_post(app, b"{}"))
    writer.close()
    assert not (tmp_path / "sink").exists()


def test_a_full_queue_drops_and_counts_and_never_waits(tmp_path: Path) -> None:
    release, writing = threading.Event(), threading.Event()
    results: list[str] = []

    def counted(result: str) -> None:
        results.append(result)
        if result == "written" and not writing.is_set():
            writing.set()
            release.wait(10)  # the writer's thread is held here: the queue fills up

    writer = CaptureWriter("w", random.Random(0), counted, capacity_bytes=2 * 600)
    redaction = Redaction.of(CaptureConfig(sink=f"file://{tmp_path}"))

    def exchange() -> Exchange:
        return Exchange("e", "b", ("GET", "/", b"", [], b""), 0.0, redaction, str(tmp_path))

    writer.offer(exchange())
    assert writing.wait(10)
    for _ in range(5):
        writer.offer(exchange())  # 2 queued, 3 dropped: none of these waits
    assert results.count("dropped") == 3
    release.set()
    writer.close()
    assert results.count("written") == 3 and len(_records(tmp_path)) == 3


def test_an_unwritable_sink_drops_and_counts(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    counts = Counts()
    writer = CaptureWriter("w", random.Random(0), counts)
    redaction = Redaction.of(CaptureConfig(sink=f"file://{tmp_path}/file"))
    writer.offer(Exchange("e", "b", ("GET", "/", b"", [], b""), 0.0, redaction, str(tmp_path / "file")))
    writer.close()
    assert counts.results == ["dropped"]


@pytest.mark.parametrize("field,value,says", [
    ("redact", ["header:"], "neither 'header:NAME' nor 'json:"),
    ("redact", ["json:password"], "neither 'header:NAME' nor 'json:"),
    ("sink", "s3:///prefix", "or an S3 bucket as 's3://BUCKET/PREFIX'"),
    ("sink", "gs://bucket/prefix", "a capture sink is a directory as 'file:///"),
    ("sink", "/var/capture", "a capture sink is a directory as 'file:///"),
])
def test_bad_capture_settings_are_refused_with_the_reason(field: str, value: Any, says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        CaptureConfig(**{"sink": "file:///tmp/x", field: value})


def _write_records(tmp_path: Path) -> Path:
    writer = CaptureWriter("node1:0", random.Random(0))
    for endpoint, commit in (("login", "c0ffee11"), ("other", "c0ffee11"), ("login", "beef0022"), ("login", None)):
        redaction = Redaction.of(CaptureConfig(sink=f"file://{tmp_path}/sink", redact=("json:$.password",)))
        exchange = Exchange(endpoint, "v1", ("POST", "/login", b"", [], b'{"password": "hunter2-password"}'),
                            1_700_000_000.0, redaction, str(tmp_path / "sink"))
        exchange.commit, exchange.status = commit, 200
        writer.offer(exchange)
    writer.close()
    return tmp_path / "sink"


def test_capture_tail_and_grep_read_a_file_sink(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gitops.cli import main

    sink = _write_records(tmp_path)
    with (sink / "node2_0-2023111422.jsonl").open("a") as broken:
        broken.write("not a record\n")
    assert main(["capture", "tail", "login", "--sink", f"file://{sink}", "-n", "2"]) == 0
    out, err = capsys.readouterr()
    assert [json.loads(line)["commit"] for line in out.splitlines()] == ["beef0022", None]
    assert "skipped 1 line(s)" in err
    assert main(["capture", "grep", "--commit", "C0FFEE", "--sink", str(sink)]) == 0
    out, _ = capsys.readouterr()
    assert sorted(json.loads(line)["endpoint"] for line in out.splitlines()) == ["login", "other"]
    assert "hunter2" not in out
    assert main(["capture", "grep", "--commit", "c0ffee", "--endpoint", "other", "--sink", str(sink)]) == 0
    assert [json.loads(line)["endpoint"] for line in capsys.readouterr()[0].splitlines()] == ["other"]


@pytest.mark.parametrize("argv,says", [
    (["capture", "grep", "--commit", "xyz", "--sink", "{sink}"], "give at least 4 hex digits"),
    (["capture", "tail", "login", "--sink", "s3://bucket/p"], "only file sinks can be read"),
    (["capture", "tail", "login", "--sink", "{sink}/missing"], "is not a directory of capture records"),
])
def test_capture_readers_refuse_bad_input_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    from gitops.cli import main

    sink = _write_records(tmp_path)
    assert main([arg.replace("{sink}", str(sink)) for arg in argv]) == 1
    err = capsys.readouterr()[1]
    assert says in err and err.count("\n") == 1 and "Traceback" not in err
