"""Retries as an endpoint's policy (`[endpoints.X.retries]`, `proxy.pool.sending`): which outcomes are sent
again, to another replica, within the backend's budget, never once an answer has started."""

from __future__ import annotations

import random
from typing import Any, AsyncGenerator

import httpx

from proxy.app import ProxyApp
from proxy.pool.calling import HandlerError, ReplicaDiedError
from tests.support.proxy_app import FakeCaller, FakeReplica, Proxy, Recorded, run
from vocabulary.control.actor_apis import ReplicaHandle
from vocabulary.request_path.wire import StreamStart, WireRequest, WireResponse
from vocabulary.spec.traffic_policy import RetriesConfig


class Counted(Recorded):
    """Keeps the retries and budget refusals the app reports."""

    def __init__(self) -> None:
        super().__init__()
        self.retries: list[tuple[str, str]] = []
        self.refused: list[str] = []

    def retried(self, backend: str, outcome: str) -> None:
        self.retries.append((backend, outcome))

    def retry_budget_spent(self, backend: str) -> None:
        self.refused.append(backend)


def counted_proxy() -> tuple[Proxy, Counted]:
    proxy = Proxy()
    counted = Counted()
    proxy.recorded = counted
    proxy.app.recorder = counted  # the app reads its recorder when it reports
    return proxy, counted


def answering(status: int) -> Any:
    async def handler(request: WireRequest) -> WireResponse:
        return status, [], b"failing"
    return handler


async def raising(request: WireRequest) -> WireResponse:
    raise HandlerError("Traceback: boom")


async def dead(request: WireRequest) -> WireResponse:
    raise ReplicaDiedError("gone")


async def codes(proxy: Proxy, n: int, method: str = "GET") -> list[tuple[int, str]]:
    async with proxy.client() as client:
        answers = [await client.request(method, "/e") for _ in range(n)]
    return [(a.status_code, a.text) for a in answers]


def test_a_503_is_sent_again_to_another_replica_and_counted() -> None:
    proxy, counted = counted_proxy()
    failing = FakeReplica("failing", answering(503))
    proxy.serve("e", "/e", {"v1": [failing, FakeReplica("good")]},
                retries=RetriesConfig(attempts=2, backoff_s=0, max_backoff_s=0, min_retries=100))

    answers = run(codes(proxy, 40))
    assert set(answers) == {(200, "good")}
    assert failing.seen and counted.retries == [("v1", "503")] * len(failing.seen)


def test_a_handler_that_raised_is_retried_when_500_is_listed_and_not_otherwise() -> None:
    for retry_on, expected in [(("500",), {(200, "good")}), (("503",), {(200, "good"), (500, "Internal Server Error")})]:
        proxy, _ = counted_proxy()
        proxy.serve("e", "/e", {"v1": [FakeReplica("raising", raising), FakeReplica("good")]},
                    retries=RetriesConfig(retry_on=retry_on, backoff_s=0, max_backoff_s=0, min_retries=100))
        answers = run(codes(proxy, 40))
        assert {code for code, _ in answers} == {code for code, _ in expected}, retry_on


def test_a_post_is_not_retried_unless_the_endpoint_says_so() -> None:
    for retries, expected in [
        (RetriesConfig(retry_on=("503",), min_retries=100), {503, 200}),
        (RetriesConfig(retry_on=("503",), methods=("POST",), non_idempotent=True, min_retries=100), {200}),
    ]:
        proxy, _ = counted_proxy()
        proxy.serve("e", "/e", {"v1": [FakeReplica("failing", answering(503)), FakeReplica("good")]}, retries=retries)
        answers = run(codes(proxy, 40, "POST"))
        assert {code for code, _ in answers} == expected


def test_the_budget_keeps_a_backend_failing_as_a_whole_from_getting_attempts_times_its_load() -> None:
    proxy, counted = counted_proxy()
    replicas = [FakeReplica(f"r{n}", answering(503)) for n in range(3)]
    proxy.serve("e", "/e", {"v1": replicas},
                retries=RetriesConfig(attempts=3, budget_percent=20, min_retries=3, backoff_s=0, max_backoff_s=0))

    answers = run(codes(proxy, 200))
    assert {code for code, _ in answers} == {503}
    calls = sum(len(r.seen) for r in replicas)
    assert calls <= 200 * 1.2 + 3  # the offered load, its 20 % budget and the minimum
    assert len(counted.retries) == calls - 200
    assert counted.refused  # the budget said no, and it was counted


def test_a_retry_goes_to_a_replica_that_has_not_failed_the_request() -> None:
    proxy, _ = counted_proxy()
    failing = [FakeReplica(f"bad{n}", answering(502)) for n in range(2)]
    proxy.serve("e", "/e", {"v1": [*failing, FakeReplica("good")]},
                retries=RetriesConfig(attempts=3, backoff_s=0, max_backoff_s=0, min_retries=1000))

    answers = run(codes(proxy, 50))
    assert set(answers) == {(200, "good")}  # with three tries, never the same failing replica twice


def test_a_died_replica_is_retried_after_a_backoff_within_the_deadline() -> None:
    proxy, counted = counted_proxy()
    proxy.serve("e", "/e", {"v1": [FakeReplica("dead", dead), FakeReplica("good")]},
                retries=RetriesConfig(backoff_s=0.01, max_backoff_s=0.01))
    answers = run(codes(proxy, 5))
    assert set(answers) == {(200, "good")}
    assert ("v1", "replica-died") in counted.retries


class StreamingCaller(FakeCaller):
    """Answers every call with the head of a stream whose status is 503."""

    def __init__(self) -> None:
        self.calls = 0

    async def call(self, handle: ReplicaHandle, request: WireRequest, timeout_s: float, batching: Any = None) -> Any:
        self.calls += 1
        return StreamStart(503, [], b"first", "s1")

    async def stream(self, handle: ReplicaHandle, start: StreamStart) -> AsyncGenerator[bytes, None]:
        if False:
            yield b""

    def discard(self, handle: ReplicaHandle, start: StreamStart) -> None:
        pass


def test_a_streamed_answer_is_never_sent_again_once_started() -> None:
    proxy = Proxy()
    caller = StreamingCaller()
    proxy.app = ProxyApp(caller, rng=random.Random(0), recorder=proxy.recorded)
    proxy.serve("e", "/e", {"v1": [FakeReplica("a"), FakeReplica("b")]},
                retries=RetriesConfig(retry_on=("503",), attempts=3, min_retries=100))

    async def scenario() -> httpx.Response:
        async with proxy.client() as client:
            return await client.get("/e")

    response = run(scenario())
    assert response.status_code == 503 and response.content == b"first"
    assert caller.calls == 1


def test_without_a_table_the_old_rule_holds_a_get_whose_replica_died_is_tried_once_more() -> None:
    proxy, counted = counted_proxy()
    proxy.serve("e", "/e", {"v1": [FakeReplica("dead", dead), FakeReplica("good")]})
    answers = run(codes(proxy, 5))
    assert set(answers) == {(200, "good")}
    assert counted.retries == [("v1", "replica-died")]
