"""The proxy's metrics carry the names and labels of docs/reference/metrics.md ("Proxy") and true values."""

from __future__ import annotations

import urllib.request

import pytest

from proxy.observability.metrics import REQUEST_BUCKETS, ProxyMetrics, ShadowResult
from tests.support.metrics import value

# The node's cache files (model and token stats) a scrape reads: none here, whatever ran on this machine before.
NO_NODE_CACHE = "/nonexistent/gitops-model-cache"


def test_finished_requests_are_counted_by_endpoint_backend_and_code() -> None:
    metrics = ProxyMetrics(NO_NODE_CACHE)
    metrics.request_finished("echo", "v1", 200, 0.002)
    metrics.request_finished("echo", "v1", 200, 0.004)
    metrics.request_finished("echo", "v1", 503, 0.0001)
    total = "gitops_http_requests_total"
    assert value(metrics, total, endpoint="echo", backend="v1", code="200") == 2
    assert value(metrics, total, endpoint="echo", backend="v1", code="503") == 1


def test_request_durations_fall_into_sub_millisecond_to_second_buckets() -> None:
    metrics = ProxyMetrics(NO_NODE_CACHE)
    metrics.request_finished("echo", "v1", 200, 0.0003)
    metrics.request_finished("echo", "v1", 200, 2.0)
    bucket = "gitops_http_request_duration_seconds_bucket"
    assert value(metrics, bucket, endpoint="echo", backend="v1", le="0.0005") == 1
    assert value(metrics, bucket, endpoint="echo", backend="v1", le="2.5") == 2
    assert REQUEST_BUCKETS[0] < 0.001 and REQUEST_BUCKETS[-1] >= 10


def test_shadow_requests_are_counted_by_result() -> None:
    metrics = ProxyMetrics(NO_NODE_CACHE)
    metrics.shadow_finished("echo", "v3", ShadowResult.OK)
    metrics.shadow_finished("echo", "v3", ShadowResult.DROPPED)
    name = "gitops_shadow_requests_total"
    assert value(metrics, name, endpoint="echo", backend="v3", result="ok") == 1
    assert value(metrics, name, endpoint="echo", backend="v3", result="dropped") == 1


def test_ongoing_requests_gauge_shows_the_latest_count() -> None:
    metrics = ProxyMetrics(NO_NODE_CACHE)
    metrics.set_ongoing("v1", 4)
    metrics.set_ongoing("v1", 1)
    assert value(metrics, "gitops_backend_ongoing_requests", backend="v1") == 1


def test_a_forgotten_endpoint_leaves_no_series_and_counts_afresh() -> None:
    metrics = ProxyMetrics(NO_NODE_CACHE)
    metrics.request_finished("echo", "v1", 200, 0.01)
    metrics.request_finished("other", "v1", 200, 0.01)
    metrics.forget_endpoint("echo")
    total = "gitops_http_requests_total"
    assert value(metrics, total, endpoint="echo", backend="v1", code="200") is None
    assert value(metrics, total, endpoint="other", backend="v1", code="200") == 1
    metrics.request_finished("echo", "v1", 200, 0.01)
    assert value(metrics, total, endpoint="echo", backend="v1", code="200") == 1


def test_a_forgotten_backend_leaves_no_series() -> None:
    metrics = ProxyMetrics(NO_NODE_CACHE)
    metrics.request_finished("echo", "v1", 200, 0.01)
    metrics.shadow_finished("echo", "v1", ShadowResult.ERROR)
    metrics.set_ongoing("v1", 2)
    metrics.forget_backend("v1")
    assert "v1" not in metrics.render().decode()


def test_endpoints_and_backends_gone_from_the_config_lose_their_series() -> None:
    metrics = ProxyMetrics(NO_NODE_CACHE)
    metrics.request_finished("echo", "v1", 200, 0.01)
    metrics.request_finished("keep", "v2", 200, 0.01)
    metrics.shadow_finished("keep", "v3", ShadowResult.OK)
    metrics.retain(endpoints={"keep"}, backends={"v2"})
    text = metrics.render().decode()
    assert 'endpoint="echo"' not in text and 'backend="v3"' not in text
    assert value(metrics, "gitops_http_requests_total", endpoint="keep", backend="v2", code="200") == 1


def test_metrics_are_served_on_their_own_port() -> None:
    metrics = ProxyMetrics(NO_NODE_CACHE)
    port = metrics.serve("127.0.0.1", 0)
    try:
        metrics.request_finished("echo", "v1", 200, 0.01)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            body = reply.read().decode()
        assert 'gitops_http_requests_total{backend="v1",code="200",endpoint="echo"} 1.0' in body
    finally:
        metrics.close()


def test_proxy_metrics_serve_as_the_proxy_apps_recorder() -> None:
    from proxy.app import Recorder

    metrics: Recorder = ProxyMetrics(NO_NODE_CACHE)
    metrics.request_done("echo", "v1", 500, 0.01)
    metrics.shadow_done("echo", "v2", "dropped")
    assert value(metrics, "gitops_http_requests_total", endpoint="echo", backend="v1", code="500") == 1
    name = "gitops_shadow_requests_total"
    assert value(metrics, name, endpoint="echo", backend="v2", result="dropped") == 1


def test_ongoing_requests_count_in_flight_and_queued_and_drop_gone_backends() -> None:
    metrics = ProxyMetrics(NO_NODE_CACHE)
    metrics.observe_load({"v1": {"ongoing": 3, "queued": 2}, "v2": {"ongoing": 1, "queued": 0}})
    metrics.observe_load({"v1": {"ongoing": 1, "queued": 1}})
    assert value(metrics, "gitops_backend_ongoing_requests", backend="v1") == 2
    assert value(metrics, "gitops_backend_ongoing_requests", backend="v2") is None


def test_a_taken_metrics_port_is_a_clear_error_naming_the_address() -> None:
    first = ProxyMetrics(NO_NODE_CACHE)
    port = first.serve("127.0.0.1", 0)
    try:
        with pytest.raises(OSError, match=f"proxy metrics cannot listen on 127.0.0.1:{port}"):
            ProxyMetrics(NO_NODE_CACHE).serve("127.0.0.1", port)
    finally:
        first.close()


def test_batch_sizes_are_a_histogram_per_backend_forgotten_with_the_backend() -> None:
    metrics = ProxyMetrics(NO_NODE_CACHE)
    metrics.batch_sent("vowels", 1)
    metrics.batch_sent("vowels", 6)
    bucket = "gitops_batch_size_bucket"
    assert value(metrics, bucket, backend="vowels", le="1.0") == 1
    assert value(metrics, bucket, backend="vowels", le="8.0") == 2
    metrics.forget_backend("vowels")
    assert value(metrics, "gitops_batch_size_count", backend="vowels") is None


def test_time_to_first_byte_is_a_histogram_per_endpoint_and_backend_forgotten_with_the_endpoint() -> None:
    metrics = ProxyMetrics(NO_NODE_CACHE)
    metrics.first_byte("ticker", "v1", 0.004)
    metrics.first_byte("ticker", "v1", 0.3)
    bucket = "gitops_http_time_to_first_byte_seconds_bucket"
    assert value(metrics, bucket, endpoint="ticker", backend="v1", le="0.005") == 1
    assert value(metrics, bucket, endpoint="ticker", backend="v1", le="0.5") == 2
    metrics.retain(endpoints=[], backends=["v1"])
    assert value(metrics, "gitops_http_time_to_first_byte_seconds_count", endpoint="ticker", backend="v1") is None


def test_a_websocket_session_is_one_request_with_no_duration_and_counts_afresh_once_forgotten() -> None:
    metrics = ProxyMetrics(NO_NODE_CACHE)
    metrics.session_finished("chat", "v1", 101)
    metrics.session_finished("chat", "v1", 101)
    metrics.session_finished("chat", "v1", 502)
    metrics.first_byte("chat", "v1", 0.01)
    total = "gitops_http_requests_total"
    assert value(metrics, total, endpoint="chat", backend="v1", code="101") == 2
    assert value(metrics, total, endpoint="chat", backend="v1", code="502") == 1
    assert value(metrics, "gitops_http_request_duration_seconds_count", endpoint="chat", backend="v1") is None
    metrics.forget_backend("v1")
    assert "chat" not in metrics.render().decode()
    metrics.session_finished("chat", "v1", 101)
    metrics.first_byte("chat", "v1", 0.01)
    assert value(metrics, total, endpoint="chat", backend="v1", code="101") == 1
    assert value(metrics, "gitops_http_time_to_first_byte_seconds_count", endpoint="chat", backend="v1") == 1


def test_a_stream_s_gaps_and_chunks_are_observed_by_endpoint_and_backend() -> None:
    from proxy.observability.metrics import ProxyMetrics

    metrics = ProxyMetrics(NO_NODE_CACHE)
    observe = metrics.gap_observer("chat", "llm")
    for gap in (0.02, 0.03, 0.02):
        observe(gap)
    metrics.stream_done("chat", "llm", 4)
    text = metrics.render().decode()
    assert 'gitops_stream_inter_chunk_seconds_count{backend="llm",endpoint="chat"} 3.0' in text
    assert 'gitops_stream_chunks_sum{backend="llm",endpoint="chat"} 4.0' in text
    metrics.retain(set(), set())
    assert 'endpoint="chat"' not in metrics.render().decode()
