"""Circuit limits through the proxy's request path (`[endpoints.X.circuit]`, `proxy.pool.circuit`): requests
beyond `max_pending_requests` waiting for a backend, and retries beyond `max_retries` in flight to it, are
answered 503 with `Retry-After` at once and counted; an endpoint without the table queues them as before."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.support.proxy_app import FakeReplica, Proxy, Recorded, run
from vocabulary.request_path.wire import WireRequest, WireResponse
from vocabulary.spec.traffic_policy import CircuitConfig, RetriesConfig


class Refusals(Recorded):
    """Keeps the circuit refusals the app reports."""

    def __init__(self) -> None:
        super().__init__()
        self.refused: list[tuple[str, str]] = []

    def circuit_open(self, backend: str, limit: str) -> None:
        self.refused.append((backend, limit))


def proxy_with(recorder: Refusals) -> Proxy:
    proxy = Proxy()
    proxy.recorded = recorder
    proxy.app.recorder = recorder  # the app reads its recorder when it reports
    return proxy


def slow(status: int, seconds: float) -> Any:
    async def handler(request: WireRequest) -> WireResponse:
        await asyncio.sleep(seconds)
        return status, [], b"slow"
    return handler


async def at_once(proxy: Proxy, n: int) -> list[Any]:
    async with proxy.client() as client:
        return list(await asyncio.gather(*(client.get("/e") for _ in range(n))))


def test_requests_beyond_max_pending_are_answered_503_with_retry_after_at_once() -> None:
    recorder = Refusals()
    proxy = proxy_with(recorder)
    # One replica taking one request at a time: 1 in flight, 3 in line, the other 6 turned away.
    proxy.serve("e", "/e", {"v1": [FakeReplica("one", slow(200, 0.05))]}, cap=1,
                circuit=CircuitConfig(max_pending_requests=3))
    answers = run(at_once(proxy, 10))
    codes = sorted(a.status_code for a in answers)
    assert codes == [200] * 4 + [503] * 6
    refused = [a for a in answers if a.status_code == 503]
    assert all(a.headers.get("retry-after") and "too many requests waiting" in a.text for a in refused)
    assert recorder.refused == [("v1", "pending")] * 6


def test_without_the_table_requests_wait_in_line() -> None:
    recorder = Refusals()
    proxy = proxy_with(recorder)
    proxy.serve("e", "/e", {"v1": [FakeReplica("one", slow(200, 0.01))]}, cap=1)
    assert {a.status_code for a in run(at_once(proxy, 10))} == {200}
    assert recorder.refused == []


def test_retries_beyond_max_retries_in_flight_are_answered_503_and_none_is_sent() -> None:
    recorder = Refusals()
    proxy = proxy_with(recorder)
    turn = iter(range(1_000))

    async def fails_first_twelve(request: WireRequest) -> WireResponse:
        if next(turn) < 12:
            await asyncio.sleep(0.02)
            return 503, [], b"overloaded"
        await asyncio.sleep(0.2)
        return 200, [], b"ok"

    replica = FakeReplica("one", fails_first_twelve)
    proxy.serve("e", "/e", {"v1": [replica]},
                retries=RetriesConfig(attempts=2, backoff_s=0, max_backoff_s=0, min_retries=1000),
                circuit=CircuitConfig(max_retries=2))
    answers = run(at_once(proxy, 12))
    # Twelve first tries fail together: two retries go out (and are answered 200), ten are refused.
    assert sorted(a.status_code for a in answers) == [200] * 2 + [503] * 10
    refused = [a for a in answers if a.status_code == 503]
    assert all(a.headers.get("retry-after") and "too many retries in flight" in a.text for a in refused)
    assert recorder.refused == [("v1", "retries")] * 10 and len(replica.seen) == 14
    # Their places freed, the next retries go out again.
    assert run(at_once(proxy, 1))[0].status_code == 200
