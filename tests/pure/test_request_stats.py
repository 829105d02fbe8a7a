"""Per-backend request counts: adding proxies up, intervals between reports, p99 from buckets."""

from __future__ import annotations

import pytest

from controller.policies.request_totals import RequestTotals
from proxy.observability.request_stats import RequestCounter
from vocabulary.control.request_stats import LATENCY_BOUNDS_S, RequestStats, bucket_of


def stats(latencies: list[float], errors: int = 0) -> RequestStats:
    buckets = [0] * (len(LATENCY_BOUNDS_S) + 1)
    for latency in latencies:
        buckets[bucket_of(latency)] += 1
    return RequestStats(requests=len(latencies), errors=errors, buckets=tuple(buckets))


@pytest.mark.parametrize(("latency", "bound"), [(0.0004, 0.001), (0.001, 0.001), (0.0011, 0.0025), (0.4, 0.5)])
def test_a_latency_falls_in_the_first_bucket_whose_bound_holds_it(latency: float, bound: float) -> None:
    assert LATENCY_BOUNDS_S[bucket_of(latency)] == bound


def test_p99_is_the_bound_of_the_bucket_holding_the_99th_percentile() -> None:
    assert stats([0.01] * 99 + [2.0]).quantile(0.99) == 0.01
    assert stats([0.01] * 98 + [2.0] * 2).quantile(0.99) == 2.0


def test_a_latency_beyond_every_bound_reads_as_the_highest_bound() -> None:
    assert stats([100.0]).quantile(0.99) == LATENCY_BOUNDS_S[-1]


def test_no_requests_have_no_errors_and_no_latency() -> None:
    assert (RequestStats().error_ratio(), RequestStats().quantile(0.99)) == (0.0, 0.0)


def test_an_interval_is_the_difference_of_two_cumulative_reports() -> None:
    later = stats([0.01] * 10 + [0.5] * 5, errors=3)
    interval = later.since(stats([0.01] * 10, errors=1))
    assert (interval.requests, interval.errors, interval.quantile(0.5)) == (5, 2, 0.5)


def test_a_count_that_went_down_is_a_restarted_counter_and_all_of_it_is_new() -> None:
    restarted = stats([0.01] * 3)
    assert restarted.since(stats([0.01] * 10)) == restarted


def test_totals_add_each_proxy_s_increments() -> None:
    totals = RequestTotals().absorb("p1", {"v2": stats([0.01] * 4)}).absorb("p2", {"v2": stats([0.01] * 6)})
    totals = totals.absorb("p1", {"v2": stats([0.01] * 5)})
    assert totals.totals["v2"].requests == 11


def test_totals_keep_growing_across_a_proxy_restart() -> None:
    totals = RequestTotals().absorb("p1", {"v2": stats([0.01] * 10)}).absorb("p1", {"v2": stats([0.01] * 2)})
    assert totals.totals["v2"].requests == 12


def test_totals_survive_a_json_round_trip() -> None:
    totals = RequestTotals().absorb("p1", {"v2": stats([0.01, 0.3], errors=1)})
    assert RequestTotals.model_validate_json(totals.model_dump_json()) == totals


def test_the_proxy_counts_answers_5xx_and_latency_per_backend() -> None:
    counter = RequestCounter()
    for status, duration in ((200, 0.01), (500, 0.01), (503, 2.0), (404, 0.01)):
        counter.record("v2", status, duration)
    counter.record("v1", 200, 0.01)
    seen = counter.snapshot()
    assert (seen["v2"].requests, seen["v2"].errors, seen["v2"].quantile(0.99)) == (4, 2, 2.0)
    assert seen["v1"] == stats([0.01])


def test_a_websocket_session_is_a_request_and_a_5xx_one_an_error_but_never_a_latency() -> None:
    counter = RequestCounter()
    counter.record("v1", 200, 0.01)
    earlier = counter.snapshot()["v1"]
    counter.record_session("v1", 101)
    counter.record_session("v1", 502)
    now = counter.snapshot()["v1"]
    assert (now.requests, now.errors, sum(now.buckets)) == (3, 1, 1)
    assert now.quantile(0.99) == 0.01  # an hour-long session is no p99
    interval = now.since(earlier)
    assert (interval.requests, interval.errors, interval.error_ratio()) == (2, 1, 0.5)


def test_answers_are_counted_per_endpoint_as_well_as_per_backend() -> None:
    from proxy.observability.request_stats import RequestCounter

    counter = RequestCounter()
    counter.record("shared", 200, 0.01, "api")
    counter.record("shared", 500, 0.01, "admin")
    counter.record_session("shared", 500, "admin")
    assert counter.snapshot()["shared"].requests == 3
    by_endpoint = counter.by_endpoint()
    assert (by_endpoint["api"].requests, by_endpoint["api"].errors) == (1, 0)
    assert (by_endpoint["admin"].requests, by_endpoint["admin"].errors) == (2, 2)


def test_totals_begun_afresh_take_a_proxys_first_report_as_its_start() -> None:
    from controller.policies.request_totals import RequestTotals

    totals = RequestTotals().absorb_after_first("p1", {"api": RequestStats(requests=100)})
    assert totals.totals == {}
    totals = totals.absorb_after_first("p1", {"api": RequestStats(requests=104, errors=1)})
    assert (totals.totals["api"].requests, totals.totals["api"].errors) == (4, 1)
