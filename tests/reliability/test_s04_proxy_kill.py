"""Scenario 4: kill -9 the proxy under load.

The new proxy never answers 404: until its first route table it answers 503
with Retry-After (and /-/healthz 503). Ray restarts it in place, so it serves
again within seconds (the issue's target is 1 s). The refused-connection
window is reported.
"""

from __future__ import annotations

import asyncio
import random
import time

import httpx

from proxy.app import ProxyApp
from proxy.shell.raycalls import RayCaller
from tests.support.faults import kill9
from tests.support.load import FailureKind, SteadyLoad
from tests.support.scenario import record_run, under_load
from tests.support.serving import Serving
from tests.support.stack import eventually

# How fast is a benchmark's figure, not this test's: `bench.faults` measures the
# proxy's kill -9 recovery (about 1 s quiet: Ray starts the new worker process in
# 0.6 s, the proxy's own part, imports, bind and its whole table in one long-poll
# round trip, is 0.3-0.7 s), and the reliability report records this run's. The
# bound here only says the proxy came back by itself, as Ray restarts it in place:
# CI's real tier (load 10-23 on 2 cores) once took 5.1 s against an earlier 4 s.
SERVE_AGAIN_WITHIN_S = 20.0


def test_a_killed_proxy_is_restarted_in_place_and_never_answers_404(serving: Serving, backend: str, window_s: float) -> None:
    serving.deploy(backend, 2)
    serving.route(backend)

    def kill_the_proxy(load: SteadyLoad) -> float:
        kill9(serving.proxy_handle())
        killed = time.monotonic()  # after the SIGKILL: requests sent before it say nothing
        answered = eventually(lambda: load.first_answered_after(killed), 60, what="a 200 from the new proxy")
        return answered - killed

    report, back_in_s = under_load(serving.load_url(backend), window_s, kill_the_proxy)
    refused = [f.at for f in report.failures if f.kind is FailureKind.REFUSED]
    refused_window = (max(refused) - min(refused)) if refused else 0.0
    leaked = serving.leaked()
    record_run("4", "kill -9 the proxy", report, back_in_s, leaked,
               f"refused for {refused_window:.2f} s; 404s: {report.failed_with(404)}")
    assert report.failed_with(404) == 0, report.summary()
    assert back_in_s < SERVE_AGAIN_WITHIN_S, report.summary()
    assert leaked == 0


def _fresh_proxy_answers(path: str) -> httpx.Response:
    app = ProxyApp(RayCaller(1, 0.0), rng=random.Random(0))

    async def get() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
            return await client.get(path)

    return asyncio.run(get())


def test_a_proxy_without_its_first_route_table_answers_503_with_retry_after() -> None:
    response = _fresh_proxy_answers("/svc")
    assert response.status_code == 503 and "retry-after" in response.headers


def test_a_proxy_without_its_first_route_table_is_not_healthy() -> None:
    assert _fresh_proxy_answers("/-/healthz").status_code == 503


def test_a_killed_proxy_counts_one_restart_in_status(serving: Serving) -> None:
    def restarts() -> int:
        return sum(p.restarts for p in serving.status().proxies.values())

    before = restarts()
    kill9(serving.proxy_handle())
    eventually(lambda: restarts() > before, 60, what="the proxy's restart counted")
    assert restarts() == before + 1
