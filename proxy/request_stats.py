"""Counting each backend's answers for rollout checks: requests, 5xx, latency buckets.

One `RequestCounter` per proxy, fed once per request from the request path
(a few integer increments, no allocation) and read by the load reporter as
`vocabulary.request_stats.RequestStats` values, cumulative since the proxy
started. Counts are per backend, whatever endpoint the request came in by.
A WebSocket session (`record_session`) is one request, and one error when it
failed as a 5xx would (no free replica, the replica died, the app raised);
its lifetime is no latency and goes in no bucket. No I/O.
"""

from __future__ import annotations

from vocabulary.request_stats import LATENCY_BOUNDS_S, RequestStats, bucket_of

__all__ = ["RequestCounter"]

_BUCKETS = len(LATENCY_BOUNDS_S) + 1


class RequestCounter:
    def __init__(self) -> None:
        # backend -> [requests, 5xx, bucket 0, bucket 1, ...]
        self._counts: dict[str, list[int]] = {}

    def record(self, backend: str, status: int, duration_s: float) -> None:
        counts = self._counts.get(backend)
        if counts is None:
            counts = self._counts[backend] = [0] * (2 + _BUCKETS)
        counts[0] += 1
        counts[1] += status >= 500
        counts[2 + bucket_of(duration_s)] += 1

    def record_session(self, backend: str, status: int) -> None:
        counts = self._counts.get(backend)
        if counts is None:
            counts = self._counts[backend] = [0] * (2 + _BUCKETS)
        counts[0] += 1
        counts[1] += status >= 500

    def snapshot(self) -> dict[str, RequestStats]:
        return {
            backend: RequestStats(requests=c[0], errors=c[1], buckets=tuple(c[2:]))
            for backend, c in self._counts.items()
        }
