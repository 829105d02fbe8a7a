"""Outlier ejection through the proxy's request path (`[endpoints.X.outliers]`, `proxy.pool.outliers` wired
into the pool): a replica answering 5xx leaves routing, is counted, reported for the status, and, ejected
too often, reported for replacement; an endpoint without the table ejects nobody."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from tests.support.proxy_app import FakeReplica, Proxy, Recorded, run
from vocabulary.request_path.wire import WireRequest, WireResponse
from vocabulary.spec.traffic_policy import OutliersConfig, RetriesConfig


class Ejections(Recorded):
    """Keeps the ejections the app reports."""

    def __init__(self) -> None:
        super().__init__()
        self.ejected: list[str] = []

    def replica_ejected(self, backend: str) -> None:
        self.ejected.append(backend)


def answering(status: int) -> Any:
    async def handler(request: WireRequest) -> WireResponse:
        return status, [], b"failing"
    return handler


async def codes(proxy: Proxy, n: int) -> list[tuple[int, str]]:
    async with proxy.client() as client:
        answers = [await client.get("/e") for _ in range(n)]
    return [(a.status_code, a.text) for a in answers]


def proxy_with(recorder: Ejections) -> Proxy:
    proxy = Proxy()
    proxy.recorded = recorder
    proxy.app.recorder = recorder  # the app reads its recorder when it reports
    return proxy


def half_failing() -> Any:
    turn = itertools.count()

    async def handler(request: WireRequest) -> WireResponse:
        return (500, [], b"bad") if next(turn) % 2 else (200, [], b"bad")
    return handler


def test_a_replica_answering_500s_is_ejected_and_gets_no_more_requests() -> None:
    recorder = Ejections()
    proxy = proxy_with(recorder)
    bad = FakeReplica("bad", answering(500))
    good = [FakeReplica("good-1"), FakeReplica("good-2")]
    proxy.serve("e", "/e", {"v1": [bad, *good]},
                retries=RetriesConfig(attempts=2, backoff_s=0, max_backoff_s=0, min_retries=1000, retry_on=("500",)),
                outliers=OutliersConfig(consecutive_errors=3, base_ejection_s=60))

    answers = run(codes(proxy, 200))
    assert {code for code, _ in answers} == {200}
    assert len(bad.seen) == 3, "ejected at its third error in a row, sent nothing after"
    assert recorder.ejected == ["v1"]
    [(replica_id, ejection)] = proxy.app.ejected_replicas()["v1"].items()
    assert replica_id == "bad" and ejection["reason"] == "3 consecutive errors" and ejection["count"] == 1
    assert 55 < ejection["back_in_s"] <= 60 and not ejection["replace"]
    assert proxy.app.backend_load()["v1"]["ejected"] == 1


def test_without_the_table_a_failing_replica_keeps_its_share() -> None:
    recorder = Ejections()
    proxy = proxy_with(recorder)
    bad = FakeReplica("bad", answering(500))
    proxy.serve("e", "/e", {"v1": [bad, FakeReplica("good")]})
    run(codes(proxy, 100))
    assert len(bad.seen) > 20 and recorder.ejected == []
    assert proxy.app.ejected_replicas() == {}


def test_a_replica_ejected_replace_after_times_is_reported_for_replacement() -> None:
    recorder = Ejections()
    proxy = proxy_with(recorder)
    bad = FakeReplica("bad", half_failing())
    proxy.serve("e", "/e", {"v1": [bad, FakeReplica("good-1"), FakeReplica("good-2")]},
                outliers=OutliersConfig(consecutive_errors=1, base_ejection_s=0.01, replace_after=3))
    for _ in range(30):  # each round outlasts the ejections so far (0.01 s, 0.02 s)
        run(codes(proxy, 20))
        if len(recorder.ejected) >= 3:
            break
        run(_sleep(0.05))
    assert len(recorder.ejected) == 3
    [(replica_id, ejection)] = proxy.app.ejected_replicas()["v1"].items()
    assert replica_id == "bad" and ejection["count"] == 3 and ejection["replace"]
    seen = len(bad.seen)
    run(_sleep(0.1))
    run(codes(proxy, 50))
    assert len(bad.seen) == seen, "a worn-out replica stays out until the controller replaces it"


async def _sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)
