"""A rollout step's PromQL checks, asked of a real Prometheus scraping a real proxy metrics exporter.

The controller's shell (`controller.shell.prometheus`) asks the queries the pure
rollout (`controller.policies.rollouts`) says are due, with their variables filled
in; the answers judge the step: a canary's 5xx share out of bounds aborts
it, an unreachable Prometheus or a query that yields no single number holds
it with the reason in its message.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Iterator

import httpx
import pytest

from controller.policies.rollouts import advance, begin, due_queries
from controller.shell.prometheus import ask_all
from proxy.observability.metrics import ProxyMetrics
from tests.real.test_progressive_delivery import Cluster, Traffic, answered
from tests.support.prometheus import Prometheus
from tests.support.stack import eventually, free_port
from vocabulary.control.rollouts import CheckName, MetricQuery, MetricReading, Rollout, RolloutPhase
from vocabulary.spec.rollout_config import MetricCheck, RolloutConfig

pytestmark = pytest.mark.real

ERROR_SHARE = (
    'sum(gitops_http_requests_total{endpoint="$endpoint",backend="$backend",code=~"5.."})'
    ' / sum(gitops_http_requests_total{endpoint="$endpoint",backend="$backend"})'
)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """Prometheus scraping one proxy exporter whose canary v2 failed 1 request in 5."""
    port = free_port()
    metrics = ProxyMetrics()
    metrics.serve("127.0.0.1", port)
    for code in (200, 200, 200, 200, 500):
        metrics.request_finished("echo", "v2", code, 0.01)
        metrics.request_finished("echo", "v1", 200, 0.01)
    server = Prometheus(tmp_path_factory.mktemp("prometheus"), {"gitops-agent": [], "gitops-proxy": [f"127.0.0.1:{port}"]})
    try:
        server.wait_for('gitops_http_requests_total{backend="v2",code="500"}', bool)
        yield server
    finally:
        server.stop()
        metrics.close()


def rollout(check: MetricCheck) -> Rollout:
    config = RolloutConfig(steps=(0.5, 1.0), step_interval_s=1, min_requests=0, metrics=(check,))
    return begin("echo", {"v1": 1.0}, {"v1": 0.5, "v2": 0.5}, config, {}, now=0.0)


def ask(url: str | None, queries: tuple[MetricQuery, ...]) -> dict[tuple[str, str], MetricReading]:
    async def run() -> list[tuple[MetricQuery, MetricReading]]:
        async with httpx.AsyncClient(timeout=5) as client:
            return await ask_all(client, url, queries, clock=lambda: 5.0)

    return {(q.check, q.backend): reading for q, reading in asyncio.run(run())}


def judged(url: str | None, check: MetricCheck) -> Rollout:
    started = rollout(check)
    readings = ask(url, due_queries(started, {}, now=5.0))
    return advance(started, {}, now=5.0, readings=readings).rollout


def test_a_canary_whose_promql_error_share_is_out_of_bounds_is_aborted(prometheus: Prometheus) -> None:
    aborted = judged(prometheus.url, MetricCheck(name="error-share", query=ERROR_SHARE, max=0.1))
    assert aborted.phase is RolloutPhase.ABORTED and aborted.weights() == {"v1": 1.0}
    assert "v2: error-share 0.2 > 0.1" in aborted.message()


def test_a_canary_within_its_promql_bounds_moves_to_the_next_step(prometheus: Prometheus) -> None:
    moved = judged(prometheus.url, MetricCheck(name="error-share", query=ERROR_SHARE, max=0.25))
    assert moved.phase is RolloutPhase.STEPPING and moved.step == 1
    assert [(c.metric, c.measured, c.passed) for c in moved.checks if c.metric] == [("error-share", 0.2, True)]


def test_an_unreachable_prometheus_holds_the_step_and_says_so() -> None:
    held = judged(f"http://127.0.0.1:{free_port()}", MetricCheck(name="error-share", query=ERROR_SHARE, max=0.1))
    assert held.phase is RolloutPhase.STEPPING and held.step == 0
    assert "unreachable" in (held.analysis_error or "") and "held:" in held.message()


def test_a_query_returning_several_series_holds_the_step_and_says_so(prometheus: Prometheus) -> None:
    several = MetricCheck(name="per-code", query='gitops_http_requests_total{endpoint="$endpoint"}', max=100)
    held = judged(prometheus.url, several)
    assert held.step == 0 and "series, not one number" in (held.analysis_error or "")


def test_a_promql_syntax_error_holds_the_step_with_prometheus_error(prometheus: Prometheus) -> None:
    held = judged(prometheus.url, MetricCheck(name="broken", query="sum(", max=1))
    assert held.step == 0 and "query failed" in (held.analysis_error or "")


def test_without_a_prometheus_url_a_metric_check_holds_the_step_and_names_the_flag() -> None:
    held = judged(None, MetricCheck(name="error-share", query=ERROR_SHARE, max=0.1))
    assert held.step == 0 and "--prometheus-url" in (held.analysis_error or "")


# --- the whole loop: real Ray, real proxy, Prometheus scraping it ------------------------------

RATE_SHARE = (
    '(sum(increase(gitops_http_requests_total{endpoint="$endpoint",backend="$backend",code=~"5.."}[$interval]))'
    ' or vector(0)) / sum(increase(gitops_http_requests_total{endpoint="$endpoint",backend="$backend"}[$interval]))'
)


@pytest.fixture(scope="module")
def scraped_cluster(ray_session: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Prometheus]]:
    """A controller asking a Prometheus that scrapes its proxy every second.

    Started with an earlier agent's Prometheus (nothing listens there), then
    given this one as a restarted agent gives it: the checks must ask this one."""
    metrics_port = free_port()
    prometheus = Prometheus(tmp_path_factory.mktemp("scraping"),
                            {"gitops-agent": [], "gitops-proxy": [f"127.0.0.1:{metrics_port}"]})
    cluster = Cluster(f"{ray_session}-promql-{uuid.uuid4().hex[:6]}", proxy_metrics_port=metrics_port,
                      prometheus_url=f"http://127.0.0.1:{free_port()}")
    cluster.client.set_prometheus_url(prometheus.url)
    try:
        yield cluster, prometheus
    finally:
        cluster.client.shutdown()
        prometheus.stop()


def test_a_canary_is_aborted_by_its_promql_check_on_prometheus_scraping_the_proxy(
    scraped_cluster: tuple[Cluster, Prometheus],
) -> None:
    cluster, prometheus = scraped_cluster
    cluster.backend("pq-v1")
    cluster.backend("pq-v2", error_share=0.2)
    # The proxy's own thresholds let everything pass: only the PromQL check can stop this canary.
    steps = RolloutConfig(steps=(0.5, 1.0), step_interval_s=4, min_requests=5, max_error_ratio=1.0,
                          metrics=(MetricCheck(name="error-share", query=RATE_SHARE, max=0.05),))
    cluster.endpoint("pq", {"pq-v1": 1.0}, steps)
    traffic = Traffic(f"{cluster.url}/pq")
    try:
        cluster.endpoint("pq", {"pq-v1": 0.5, "pq-v2": 0.5}, steps)
        aborted = eventually(
            lambda: (r := cluster.rollout("pq")) is not None and r.phase is RolloutPhase.ABORTED and r, 60, 0.1,
            what="the PromQL check to abort the rollout",
        )
        stopped = time.monotonic()
        after = eventually(lambda: answered(traffic, stopped + 1.0, 30), 20)
    finally:
        traffic.stop()
    [failed] = aborted.failed()
    assert (failed.name, failed.metric, failed.backend, failed.threshold) == (
        CheckName.METRIC, "error-share", "pq-v2", 0.05
    )
    assert 0.05 < failed.measured <= 0.5
    assert set(after) == {"pq-v1"}
    counted = prometheus.value('sum(gitops_http_requests_total{endpoint="pq",backend="pq-v2"})')
    assert counted is not None and counted > 0
