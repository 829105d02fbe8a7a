"""Capture under a hostile client, through a real proxy worker (issue 50, row 1).

The proxy as the real tier starts it (a Ray actor started by a real
controller, with a metrics port), the shipped echo behind it, and capture on
with `json:` redaction rules. A 3 KB body nested 1,500 levels deep, then 60
POSTs of 4 MiB: the worker stays the same process, its capture writer still
writes records after them, every captured exchange is counted as written or
dropped, and the worker's resident memory stays within what the documented
caps allow.

The bound. What a worker may keep after such a flood is its capture queue,
at most 32 MiB of records waiting (`DEFAULT_CAPACITY_BYTES`; a 4 MiB body is
cut to what its record shows before it is queued), plus the buffers of the
one exchange in flight, which the allocator may keep for the next: the
request's 4 MiB, its frame to the replica, the reply and the reply's frame,
about 4 x 4 MiB, counted twice for the allocator's slack: 32 MiB. Hence 64
MiB of growth at most, kept or at the peak; before the fix the same flood
took a worker from 118 MB to 838 MB, never freed. (The cap on request bodies
a worker holds at once, 512 MiB, is for concurrent requests; these are sent
one after the other.) The component test (tests/component/test_capture_hostile.py)
counts the Python allocations of the same flood in one process; this one
measures the process.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import ray

from controller.state.proxy_fleet import PROXY_PREFIX
from proxy.observability.capture import DEFAULT_CAPACITY_BYTES
from tests.support.examples import ShippedExamples, serve_shipped_examples
from tests.support.faults import actor_pid
from tests.support.process_memory import resident_bytes
from tests.support.stack import eventually, free_port, met, named_actors, run
from vocabulary.spec.endpoints import CaptureConfig

pytestmark = pytest.mark.real

MIB = 1 << 20
BODY_MIB = 4
POSTS = 60
# Per the docstring: the queue's cap, and one exchange's buffers twice over.
GROWTH_BOUND = DEFAULT_CAPACITY_BYTES + 2 * 4 * BODY_MIB * MIB
RULES = ("json:$.password", "json:$.card.number")


@pytest.fixture(scope="module")
def served(ray_session: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ShippedExamples, Path, int]]:
    sink = tmp_path_factory.mktemp("capture-memory")
    code = tmp_path_factory.mktemp("code")
    metrics_port = free_port()
    for examples in serve_shipped_examples(ray_session, code, proxy_metrics_port=metrics_port):
        examples.backend("echo-v1", "flood-echo", commit="f100d0000")
        config = examples.state.endpoints["echo"].model_copy(update={
            "name": "flood", "route": "/flood", "traffic": {"flood-echo": 1.0},
            "capture": CaptureConfig(sample=1.0, sink=f"file://{sink}", redact=RULES),
        })
        met(examples.client, run(examples.client.apply_endpoint(config)))
        yield examples, sink, metrics_port


class _Peak:
    """The highest resident memory of a process while it runs, sampled every 20 ms."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, resident_bytes(pid), threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, resident_bytes(self.pid))

    def __enter__(self) -> _Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _captured(metrics_port: int) -> dict[str, int]:
    page = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
    counts = {"written": 0, "dropped": 0}
    for result, value in re.findall(r'^gitops_capture_records_total\{result="(\w+)"\} ([0-9.e+]+)$', page, re.MULTILINE):
        counts[result] = int(float(value))
    return counts


def _records(sink: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sink.glob("*.jsonl") for line in path.read_text().splitlines()]


def test_a_hostile_body_and_60_posts_of_4_mib_leave_the_worker_alive_writing_and_bounded(
    served: tuple[ShippedExamples, Path, int],
) -> None:
    examples, sink, metrics_port = served
    namespace = examples.namespace
    worker = ray.get_actor(min(named_actors(namespace, PROXY_PREFIX)), namespace=namespace)
    pid = actor_pid(worker)
    with httpx.Client(base_url=examples.url, timeout=60) as client:
        for _ in range(3):  # warm: the route, the replica connection, the writer's file
            assert client.post("/flood", content=b'{"password": "warm"}').status_code == 200
        eventually(lambda: sum(_captured(metrics_port).values()) >= 3 or None, 30, 0.2, what="3 warm records")
        before = resident_bytes(pid)
        hostile = b"[" * 1500 + b"]" * 1500  # 3 KB, 1,500 levels
        big = b'{"password":"' + b"x" * (BODY_MIB * MIB - 16) + b'"}'
        with _Peak(pid) as peak:
            assert client.post("/flood", content=hostile).status_code == 200
            for _ in range(POSTS):
                assert client.post("/flood", content=big).status_code == 200
        sent = 3 + 1 + POSTS

        def all_counted() -> dict[str, int] | None:
            counts = _captured(metrics_port)
            return counts if counts["written"] + counts["dropped"] >= sent else None

        counted = eventually(all_counted, 60, 0.2, what="every captured exchange written or dropped")
        # Still writing after the flood: one more small exchange makes one more record.
        later = b'{"password": "after", "n": 12345}'
        assert client.post("/flood", content=later).status_code == 200
        eventually(lambda: any('"n":12345' in r["request"]["body"].get("text", "") for r in _records(sink)),
                   30, 0.2, what="a record written after the flood")
        after = resident_bytes(pid)
    assert actor_pid(worker) == pid  # the same worker: it never died
    assert counted is not None
    assert counted["written"] + counted["dropped"] == sent, counted  # nothing lost uncounted
    records = _records(sink)
    nested = [r for r in records if r["request"]["body"].get("bytes") == len(hostile)]
    assert nested and "withheld" in nested[0]["request"]["body"], nested  # not parsed, not fatal
    shown = [r["request"]["body"].get("text", "") for r in records]
    assert not [text for text in shown if "warm" in text or "after" in text]  # redacted by the json: rule
    print(f"\nproxy worker RSS: {before / MIB:.0f} MiB before, {peak.peak / MIB:.0f} MiB at the peak, "
          f"{after / MIB:.0f} MiB after; bound {GROWTH_BOUND / MIB:.0f} MiB of growth; capture {counted}")
    assert peak.peak - before < GROWTH_BOUND, f"{(peak.peak - before) / MIB:.0f} MiB at the peak"
    assert after - before < GROWTH_BOUND, f"{(after - before) / MIB:.0f} MiB kept"
