"""Counting each backend's (and endpoint's) answers: requests, 5xx, latency buckets.

One `RequestCounter` per proxy, fed once per request from the request path
(a few integer increments, no allocation) and read by the load reporter as
`vocabulary.control.request_stats.RequestStats` values, cumulative since the proxy
started. Counts are per backend, whatever endpoint the request came in by
(rollout checks and the status judge these), and per endpoint (`by_endpoint`,
for the status and a promotion's evidence), which also counts the shadow
replies compared with their primary's answer and those that differed
(`record_comparison`).
A WebSocket session (`record_session`) is one request, and one error when it
failed as a 5xx would (no free replica, the replica died, the app raised);
its lifetime is no latency and goes in no bucket. No I/O.
"""

from __future__ import annotations

from vocabulary.control.request_stats import LATENCY_BOUNDS_S, RequestStats, bucket_of

__all__ = ["RequestCounter"]

_BUCKETS = len(LATENCY_BOUNDS_S) + 1


class RequestCounter:
    def __init__(self) -> None:
        # backend -> [requests, 5xx, bucket 0, bucket 1, ...]
        self._counts: dict[str, list[int]] = {}
        self._endpoints: dict[str, list[int]] = {}  # endpoint -> the same
        self._comparisons: dict[str, list[int]] = {}  # endpoint -> [shadow replies compared, mismatched]

    def record(self, backend: str, status: int, duration_s: float, endpoint: str = "") -> None:
        bucket = 2 + bucket_of(duration_s)
        error = status >= 500
        counts = self._counts.get(backend)
        if counts is None:
            counts = self._counts[backend] = [0] * (2 + _BUCKETS)
        counts[0] += 1
        counts[1] += error
        counts[bucket] += 1
        counts = self._endpoints.get(endpoint)
        if counts is None:
            counts = self._endpoints[endpoint] = [0] * (2 + _BUCKETS)
        counts[0] += 1
        counts[1] += error
        counts[bucket] += 1

    def record_session(self, backend: str, status: int, endpoint: str = "") -> None:
        for table, key in ((self._counts, backend), (self._endpoints, endpoint)):
            counts = table.get(key)
            if counts is None:
                counts = table[key] = [0] * (2 + _BUCKETS)
            counts[0] += 1
            counts[1] += status >= 500

    def record_comparison(self, endpoint: str, matched: bool) -> None:
        """A shadow reply of `endpoint` was compared with its primary's answer."""
        counts = self._comparisons.get(endpoint)
        if counts is None:
            counts = self._comparisons[endpoint] = [0, 0]
        counts[0] += 1
        counts[1] += not matched

    def snapshot(self) -> dict[str, RequestStats]:
        return _stats(self._counts)

    def by_endpoint(self) -> dict[str, RequestStats]:
        """The same counts per endpoint (requests recorded without one count under ""),
        with its shadow comparisons."""
        stats = _stats(self._endpoints)
        for endpoint, (compared, mismatched) in self._comparisons.items():
            stats[endpoint] = stats.get(endpoint, RequestStats()).model_copy(
                update={"compared": compared, "mismatched": mismatched}
            )
        return stats


def _stats(table: dict[str, list[int]]) -> dict[str, RequestStats]:
    return {key: RequestStats(requests=c[0], errors=c[1], buckets=tuple(c[2:])) for key, c in table.items()}
