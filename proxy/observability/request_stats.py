"""Counting each backend's (and endpoint's) answers: requests, 5xx, latency buckets.

One `RequestCounter` per proxy, fed once per request from the request path
(three integer increments, no allocation) and read by the load reporter as
`vocabulary.control.request_stats.RequestStats` values, cumulative since the proxy
started. Counts are kept per backend and endpoint together, and summed when
read: per backend, whatever endpoint the request came in by (`snapshot`:
rollout checks and the status judge these), and per endpoint (`by_endpoint`,
for the status and a promotion's evidence), which also counts the shadow
replies compared with their primary's answer and those that differed
(`record_comparison`). A request is counted once, not once per view: the
reads come every few seconds, the requests thousands of times a second.
A WebSocket session (`record_session`) is one request, and one error when it
failed as a 5xx would (no free replica, the replica died, the app raised);
its lifetime is no latency and goes in no bucket. No I/O.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Mapping

from vocabulary.control.request_stats import LATENCY_BOUNDS_S, RequestStats

__all__ = ["RequestCounter"]

_BUCKETS = len(LATENCY_BOUNDS_S) + 1
_NONE: Mapping[str, list[int]] = {}  # an endpoint nothing was counted for yet


class RequestCounter:
    def __init__(self) -> None:
        # endpoint -> backend -> [requests, 5xx, bucket 0, bucket 1, ...]
        self._counts: dict[str, dict[str, list[int]]] = {}
        self._comparisons: dict[str, list[int]] = {}  # endpoint -> [shadow replies compared, mismatched]

    def record(self, backend: str, status: int, duration_s: float, endpoint: str = "") -> None:
        counts = self._counts.get(endpoint, _NONE).get(backend) or self._row(endpoint, backend)
        counts[0] += 1
        counts[1] += status >= 500
        counts[2 + bisect_left(LATENCY_BOUNDS_S, duration_s)] += 1  # `bucket_of`, without a call of its own

    def record_session(self, backend: str, status: int, endpoint: str = "") -> None:
        counts = self._row(endpoint, backend)
        counts[0] += 1
        counts[1] += status >= 500

    def _row(self, endpoint: str, backend: str) -> list[int]:
        backends = self._counts.get(endpoint)
        if backends is None:
            backends = self._counts[endpoint] = {}
        counts = backends.get(backend)
        if counts is None:
            counts = backends[backend] = [0] * (2 + _BUCKETS)
        return counts

    def record_comparison(self, endpoint: str, matched: bool) -> None:
        """A shadow reply of `endpoint` was compared with its primary's answer."""
        counts = self._comparisons.get(endpoint)
        if counts is None:
            counts = self._comparisons[endpoint] = [0, 0]
        counts[0] += 1
        counts[1] += not matched

    def snapshot(self) -> dict[str, RequestStats]:
        by_backend: dict[str, list[int]] = {}
        for backends in self._counts.values():
            for backend, counts in backends.items():
                _add(by_backend, backend, counts)
        return _stats(by_backend)

    def by_endpoint(self) -> dict[str, RequestStats]:
        """The same counts per endpoint (requests recorded without one count under ""),
        with its shadow comparisons."""
        by_endpoint: dict[str, list[int]] = {}
        for endpoint, backends in self._counts.items():
            for counts in backends.values():
                _add(by_endpoint, endpoint, counts)
        stats = _stats(by_endpoint)
        for endpoint, (compared, mismatched) in self._comparisons.items():
            stats[endpoint] = stats.get(endpoint, RequestStats()).model_copy(
                update={"compared": compared, "mismatched": mismatched}
            )
        return stats


def _add(table: dict[str, list[int]], key: str, counts: list[int]) -> None:
    total = table.get(key)
    table[key] = list(counts) if total is None else [a + b for a, b in zip(total, counts)]


def _stats(table: dict[str, list[int]]) -> dict[str, RequestStats]:
    return {key: RequestStats(requests=c[0], errors=c[1], buckets=tuple(c[2:])) for key, c in table.items()}
