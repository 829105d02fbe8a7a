"""Capture under a hostile client, in-process with a fake replica and a real capture
writer on a tmp directory: a body nested 1,500 levels deep and then 60 POSTs of
4 MiB leave the writer alive and the memory bounded; any exception while a record
is built counts as dropped and the writer goes on; headers are bounded like bodies,
credential-looking headers and URL queries redacted without a rule; the file sink
is private (0700, 0600) whatever the umask, never follows a link and refuses a
directory another user owns."""

from __future__ import annotations

import asyncio
import gc
import os
import random
import stat
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

import proxy.observability.capture as capture
from proxy.observability.capture import CaptureWriter
from proxy.observability.redacting import Exchange, Redaction, credential_like, too_deep
from tests.support.capture import Counts
from tests.support.capture import capture_app as _app
from tests.support.capture import records as _records
from tests.support.proxy_app import FakeReplica
from vocabulary.spec.endpoints import CaptureConfig

MIB = 1 << 20


async def _posts(app: Any, bodies: list[bytes], headers: dict[str, str] | None = None) -> list[int]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
        return [(await client.post("/login", content=body, headers=headers)).status_code for body in bodies]


class _Forgetful(list[Any]):
    """A fake replica's `seen` that keeps nothing, so that what memory holds is the proxy's."""

    def append(self, item: Any) -> None:
        pass


def test_a_hostile_nested_body_then_60_posts_of_4_mib_keep_the_writer_alive_and_memory_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = FakeReplica.__init__

    def forgetful(self: FakeReplica, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        self.seen = _Forgetful()

    monkeypatch.setattr(FakeReplica, "__init__", forgetful)
    counts = Counts()
    writer = CaptureWriter("w", random.Random(0), counts)
    app = _app(tmp_path, writer)  # json: rules, as in the reproduction
    hostile = b'{"a":' * 1500 + b"1" + b"}" * 1500  # about 9 KB, 1,500 levels
    big = b'{"password":"' + b"x" * (4 * MIB - 20) + b'"}'
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        assert asyncio.run(_posts(app, [hostile])) == [200]
        for _ in range(6):  # 60 in all, in rounds, as a client would send them
            assert asyncio.run(_posts(app, [big] * 10)) == [200] * 10
            big = bytes(big)  # a new object each round: nothing is shared with what was sent
        writer.close()
        gc.collect()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Alive: every record built (the hostile one withheld, not parsed), none left in memory.
    assert counts.results == ["written"] * 61
    records = _records(tmp_path / "sink")
    assert "nested deeper" in records[0]["request"]["body"]["withheld"]
    assert all(record["request"]["body"]["bytes"] == len(big) for record in records[1:])
    assert held - base < 16 * MIB, f"{(held - base) / MIB:.0f} MiB still held"
    assert peak - base < 96 * MIB, f"{(peak - base) / MIB:.0f} MiB at the peak"


def test_any_exception_while_a_record_is_built_counts_as_dropped_and_the_writer_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = capture.capture_record
    calls: list[int] = []

    def failing_once(exchange: Exchange, worker: str) -> dict[str, Any]:
        calls.append(1)
        if len(calls) == 1:
            raise RecursionError("maximum recursion depth exceeded")
        return built(exchange, worker)

    monkeypatch.setattr(capture, "capture_record", failing_once)
    counts = Counts()
    writer = CaptureWriter("w", random.Random(0), counts)
    app = _app(tmp_path, writer)
    for _ in range(3):
        assert asyncio.run(_posts(app, [b"{}"])) == [200]
    writer.close()
    assert counts.results == ["dropped", "written", "written"]
    assert len(_records(tmp_path / "sink")) == 2


def test_the_queue_is_bounded_in_bytes_and_what_does_not_fit_is_counted(tmp_path: Path) -> None:
    counts = Counts()
    writer = CaptureWriter("w", random.Random(0), counts, capacity_bytes=4096)
    redaction = Redaction.of(CaptureConfig(sink=f"file://{tmp_path}", max_body_bytes=3000))

    def exchange(body: bytes) -> Exchange:
        return Exchange("e", "b", ("POST", "/", b"", [], body), 0.0, redaction, str(tmp_path))

    writer._thread = capture.threading.Thread()  # no writer runs: the queue only fills
    big = exchange(b"y" * (8 * MIB))
    writer.offer(big)  # cut to what its record needs (3,000 bytes) before it is queued
    assert big.request[4] == b"y" * 3000 and big.request_bytes == 8 * MIB
    assert 3000 < writer.queued_bytes < 4096
    writer.offer(exchange(b"z" * 3000))  # does not fit in what is left
    assert counts.results == ["dropped"]


def test_headers_are_bounded_like_bodies_and_credentials_and_url_queries_redacted_without_a_rule(
    tmp_path: Path,
) -> None:
    writer = CaptureWriter("w", random.Random(0))
    app = _app(tmp_path, writer, max_body_bytes=1024, redact=())
    headers = {
        "x-api-key": "sk-key-1", "x-api_key": "sk-key-2", "x-access-key": "sk-key-3", "x-auth": "sk-key-4",
        "x-session-id": "sk-key-5", "x-csrf-token": "sk-key-6",
        "referer": "https://shop.example/cart?api_key=sk-key-7&x=1", "x-ok": "plain",
    }
    headers |= {f"x-filler-{i}": "f" * 1000 for i in range(60)}  # 60 KB of headers, 4 bytes of body
    assert asyncio.run(_posts(app, [b"{}ab"], headers)) == [200]
    writer.close()
    (path,) = (tmp_path / "sink").glob("*.jsonl")
    text = path.read_text()
    assert "sk-key" not in text
    assert len(text) < 6 * 1024, len(text)
    (record,) = _records(tmp_path / "sink")
    shown = dict(record["request"]["headers"])
    assert shown["referer"] == "https://shop.example/cart?[redacted]" and shown["x-ok"] == "plain"
    assert record["request"]["headers_cut"]["headers"] >= 59


@pytest.mark.parametrize("name", [
    "Authorization", "Proxy-Authorization", "Cookie", "Set-Cookie", "X-Api-Key", "x-api_key", "x-access-key",
    "x-auth", "X_Session", "x-refresh-token", "X-Client-Secret", "x-db-password", "x-aws-credential",
])
def test_credential_looking_header_names(name: str) -> None:
    assert credential_like(name) and credential_like(name.encode())


@pytest.mark.parametrize("name", ["content-type", "accept", "x-request-id", "traceparent", "user-agent"])
def test_ordinary_header_names_are_not_credentials(name: str) -> None:
    assert not credential_like(name)


def test_nesting_is_measured_without_parsing_and_strings_do_not_count() -> None:
    assert too_deep(b"[" * 65 + b"]" * 65) and not too_deep(b"[" * 64 + b"]" * 64)
    assert not too_deep(b'{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}')
    assert not too_deep(rb'{"a\\": [1, {"b": "}\""}]}')  # escapes inside strings
    assert too_deep(b"{[}") and too_deep(b'{"a":' * 1500 + b"1" + b"}" * 1500)


def _offer_one(tmp_path: Path, sink: Path) -> Counts:
    counts = Counts()
    writer = CaptureWriter("w", random.Random(0), counts)
    redaction = Redaction.of(CaptureConfig(sink=f"file://{sink}"))
    writer.offer(Exchange("e", "b", ("GET", "/", b"", [], b""), 0.0, redaction, str(sink)))
    writer.close()
    return counts


def test_the_file_sink_is_private_whatever_the_umask(tmp_path: Path) -> None:
    before = os.umask(0o022)
    try:
        counts = _offer_one(tmp_path, tmp_path / "new" / "sink")
    finally:
        os.umask(before)
    assert counts.results == ["written"]
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "new" / "sink").stat().st_mode) == 0o700
    (path,) = (tmp_path / "new" / "sink").glob("*.jsonl")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_the_file_sink_never_follows_a_link(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "linked").symlink_to(elsewhere)
    assert _offer_one(tmp_path, tmp_path / "linked").results == ["dropped"]
    sink = tmp_path / "sink"
    sink.mkdir()
    target = tmp_path / "victim"
    target.write_text("")
    for hour in range(24):  # whichever hour the record is written in: a link waits there
        (sink / f"w-{datetime.now(UTC).strftime('%Y%m%d')}{hour:02d}.jsonl").symlink_to(target)
    assert _offer_one(tmp_path, sink).results == ["dropped"]
    assert target.read_text() == "" and not list(elsewhere.iterdir())


def test_the_file_sink_refuses_a_directory_another_user_owns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sink = tmp_path / "sink"
    sink.mkdir()
    monkeypatch.setattr(capture.os, "geteuid", lambda: os.getuid() + 1)  # as if someone else made it
    assert _offer_one(tmp_path, sink).results == ["dropped"]
    assert not list(sink.iterdir())
