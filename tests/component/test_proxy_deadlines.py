"""Deadlines through the proxy's request path (issue 46 item 3): a client's `X-Request-Timeout`, capped by
its endpoint's `timeout_s`, bounds its request and travels with the replica call as the seconds left; a
request whose deadline passed before a replica was called is answered 504 without a call; a malformed
header is a 400 that says why; each 504 for a passed deadline is counted; a request without the header
carries nothing new."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.support.proxy_app import FakeReplica, Proxy, Recorded, run
from vocabulary.request_path.deadlines import DEADLINE_HEADER, split_deadline
from vocabulary.request_path.wire import WireRequest, WireResponse, split_root_path
from vocabulary.spec.traffic_policy import OutliersConfig

pytestmark = pytest.mark.component


class Deadlines(Recorded):
    """Keeps the deadline 504s the app reports, and the ejections."""

    def __init__(self) -> None:
        super().__init__()
        self.exceeded: list[tuple[str, str]] = []
        self.ejected: list[str] = []

    def deadline_exceeded(self, endpoint: str, when: str) -> None:
        self.exceeded.append((endpoint, when))

    def replica_ejected(self, backend: str) -> None:
        self.ejected.append(backend)


def proxy_with(recorder: Deadlines) -> Proxy:
    proxy = Proxy()
    proxy.recorded = recorder
    proxy.app.recorder = recorder  # the app reads its recorder when it reports
    return proxy


def sleeping(seconds: float) -> Any:
    async def handler(request: WireRequest) -> WireResponse:
        await asyncio.sleep(seconds)
        return 200, [], b"slept"
    return handler


async def get(proxy: Proxy, path: str, headers: dict[str, str] | None = None) -> Any:
    async with proxy.client() as client:
        return await client.get(path, headers=headers or {})


def test_a_client_deadline_ends_a_slow_call_at_it_with_504_and_the_replica_saw_the_seconds_left() -> None:
    recorder = Deadlines()
    proxy = proxy_with(recorder)
    replica = FakeReplica("slow", sleeping(5.0))
    proxy.serve("e", "/e", {"v1": [replica]}, timeout_s=10)
    started = time.perf_counter()
    answer = run(get(proxy, "/e/x", {"X-Request-Timeout": "0.2"}))
    took = time.perf_counter() - started
    assert answer.status_code == 504 and took < 1.0, (answer.status_code, took)
    assert replica.cancelled == 1
    [seen] = replica.seen
    plain, left = split_deadline(seen)
    assert left is not None and 0.1 < left <= 0.2
    assert split_root_path(plain[3])[1] == "/e"  # the route prefix reads as before once the deadline is off
    assert recorder.exceeded == [("e", "expired")]


def test_a_request_without_the_header_carries_no_deadline_and_counts_nothing() -> None:
    recorder = Deadlines()
    proxy = proxy_with(recorder)
    replica = FakeReplica("r1")
    proxy.serve("e", "/e", {"v1": [replica]})
    assert run(get(proxy, "/e")).status_code == 200
    assert all(name != DEADLINE_HEADER for name, _ in replica.seen[0][3])
    assert recorder.exceeded == []


def test_the_endpoint_s_timeout_caps_a_longer_client_deadline() -> None:
    replica = FakeReplica("r1")
    proxy = proxy_with(Deadlines())
    proxy.serve("e", "/e", {"v1": [replica]}, timeout_s=2)
    assert run(get(proxy, "/e", {"X-Request-Timeout": "60"})).status_code == 200
    left = split_deadline(replica.seen[0])[1]
    assert left is not None and 1.5 < left <= 2.0


def test_a_deadline_already_passed_is_answered_504_without_calling_a_replica() -> None:
    recorder = Deadlines()
    proxy = Proxy()
    counted = proxy.recorded  # what the counting stage was given
    proxy.app.recorder = recorder
    replica = FakeReplica("r1")
    proxy.serve("e", "/e", {"v1": [replica]})
    answer = run(get(proxy, "/e", {"X-Request-Timeout": "0"}))
    assert answer.status_code == 504 and "deadline passed before a replica was called" in answer.text
    assert replica.seen == []
    assert recorder.exceeded == [("e", "not-started")]
    assert counted.requests == [("e", "v1", 504)]  # answered, so counted like any answer


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "200ms"])
def test_a_malformed_header_is_a_400_that_says_why_and_no_replica_is_called(value: str) -> None:
    replica = FakeReplica("r1")
    proxy = proxy_with(Deadlines())
    proxy.serve("e", "/e", {"v1": [replica]})
    answer = run(get(proxy, "/e", {"X-Request-Timeout": value}))
    assert answer.status_code == 400
    assert answer.text == f"Bad Request: X-Request-Timeout must be a number of seconds >= 0, such as 0.5 (got {value!r})"
    assert replica.seen == []


def test_a_retry_carries_what_is_left_not_what_the_first_try_had() -> None:
    from vocabulary.spec.traffic_policy import RetriesConfig

    turn = iter(range(100))

    async def fails_first(request: WireRequest) -> WireResponse:
        if next(turn) == 0:
            await asyncio.sleep(0.15)
            return 503, [], b"busy"
        return 200, [], b"ok"

    replicas = [FakeReplica("a", fails_first), FakeReplica("b", fails_first)]
    proxy = proxy_with(Deadlines())
    proxy.serve("e", "/e", {"v1": replicas}, retries=RetriesConfig(attempts=2, retry_on=["503"], backoff_s=0.0))
    assert run(get(proxy, "/e", {"X-Request-Timeout": "1"})).status_code == 200
    lefts = [split_deadline(seen)[1] for replica in replicas for seen in replica.seen]
    first, second = sorted((left for left in lefts if left is not None), reverse=True)
    assert first - second >= 0.14


def test_a_call_a_client_s_short_deadline_ends_is_not_the_replica_s_error() -> None:
    recorder = Deadlines()
    proxy = proxy_with(recorder)
    replicas = [FakeReplica("slow", sleeping(1.0)), FakeReplica("slow2", sleeping(1.0))]
    proxy.serve("e", "/e", {"v1": replicas}, timeout_s=10, outliers=OutliersConfig(consecutive_errors=2))

    async def many() -> list[Any]:
        async with proxy.client() as client:
            return list(await asyncio.gather(
                *(client.get("/e", headers={"X-Request-Timeout": "0.05"}) for _ in range(6))
            ))

    assert {answer.status_code for answer in run(many())} == {504}
    assert recorder.ejected == []
    assert recorder.exceeded == [("e", "expired")] * 6


def test_the_header_is_read_in_the_pass_that_finds_the_body_wherever_it_stands() -> None:
    from proxy.pipeline.body import framed, framing

    assert framing([(b"host", b"h")]) == (False, None)
    assert framing([(b"content-length", b"3"), (b"x-request-timeout", b"0.5")]) == (True, b"0.5")
    assert framing([(b"x-request-timeout", b"1"), (b"transfer-encoding", b"chunked"),
                    (b"x-request-timeout", b"2")]) == (True, b"1")  # the first one counts
    assert framing([(b"content-length", b"0")]) == (False, None) and not framed([(b"content-length", b"0")])
    replica = FakeReplica("r1")
    proxy = proxy_with(Deadlines())
    proxy.serve("e", "/e", {"v1": [replica]})

    async def post() -> Any:
        async with proxy.client() as client:
            return await client.post("/e", content=b"abc", headers={"X-Request-Timeout": "3"})

    assert run(post()).status_code == 200
    assert replica.seen[0][4] == b"abc" and split_deadline(replica.seen[0])[1] is not None
