"""Request counts as a proxy reports them: answers, 5xx answers, latency buckets, shadow comparisons.

`RequestStats` is cumulative since the proxy started; it rides on the load
reports to the controller, which subtracts an earlier report to get the
requests of an interval (`since`) and adds up proxies (`plus`). Per
endpoint it also counts the shadow replies compared with their primary's
answer and how many of those differed (`compared`, `mismatched`: what a
promotion's shadow gate judges); per backend these stay 0. The latency
histogram has fixed bounds (`LATENCY_BOUNDS_S`) so any two stats add up
bucket by bucket and a p99 is read without the raw samples. Plain values;
the counting itself is `proxy.observability.request_stats`'.
"""

from __future__ import annotations

import bisect
from typing import Iterable

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["LATENCY_BOUNDS_S", "RequestStats", "bucket_of"]

# Upper bounds of the latency buckets, in seconds; one more bucket holds the rest.
LATENCY_BOUNDS_S: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75,
    1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 20.0, 30.0, 60.0,
)
_BUCKETS = len(LATENCY_BOUNDS_S) + 1


def bucket_of(duration_s: float) -> int:
    """The bucket a latency falls in: the first whose upper bound is >= it."""
    return bisect.bisect_left(LATENCY_BOUNDS_S, duration_s)


class RequestStats(BaseModel):
    """Answers of one backend: how many, how many were 5xx, and their latencies by bucket."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    requests: int = Field(default=0, ge=0)
    errors: int = Field(default=0, ge=0)
    buckets: tuple[int, ...] = (0,) * _BUCKETS
    compared: int = Field(default=0, ge=0)  # shadow replies compared (per endpoint)
    mismatched: int = Field(default=0, ge=0)  # of those, the ones that differed

    def plus(self, other: RequestStats) -> RequestStats:
        return RequestStats(
            requests=self.requests + other.requests,
            errors=self.errors + other.errors,
            buckets=tuple(a + b for a, b in zip(self.buckets, other.buckets)),
            compared=self.compared + other.compared,
            mismatched=self.mismatched + other.mismatched,
        )

    def since(self, earlier: RequestStats) -> RequestStats:
        """What was counted after `earlier`. A count that went down means the
        counter restarted (a new proxy): then everything counted is new."""
        if (
            self.requests < earlier.requests or self.compared < earlier.compared
            or any(a < b for a, b in zip(self.buckets, earlier.buckets))
        ):
            return self
        return RequestStats(
            requests=self.requests - earlier.requests,
            errors=max(self.errors - earlier.errors, 0),
            buckets=tuple(a - b for a, b in zip(self.buckets, earlier.buckets)),
            compared=self.compared - earlier.compared,
            mismatched=max(self.mismatched - earlier.mismatched, 0),
        )

    def error_ratio(self) -> float:
        return self.errors / self.requests if self.requests else 0.0

    def quantile(self, q: float) -> float:
        """The upper bound of the bucket holding the `q` quantile (the highest
        bound when it lies beyond them); 0 with no requests."""
        total = sum(self.buckets)
        if total == 0:
            return 0.0
        seen = 0
        for index, count in enumerate(self.buckets):
            seen += count
            if seen >= q * total:
                return LATENCY_BOUNDS_S[min(index, len(LATENCY_BOUNDS_S) - 1)]
        return LATENCY_BOUNDS_S[-1]

    @classmethod
    def total(cls, stats: Iterable[RequestStats]) -> RequestStats:
        result = cls()
        for item in stats:
            result = result.plus(item)
        return result
