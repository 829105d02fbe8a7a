"""When a failed try is sent again: an endpoint's retry policy and a backend's retry budget (pure).

`RetryPolicy` is an endpoint's `[retries]` (`vocabulary.spec.traffic_policy`)
as the request path reads it: how many tries a request of a method gets,
whether an outcome (the replica died, stalled, or answered a status code) is
tried again, and the wait before a retry (exponential, full jitter). Without
the table an endpoint keeps the proxy's old rule: a GET, HEAD or OPTIONS
whose replica died or stalled is tried once more, at once, with no budget.

`RetryBudget` is kept per backend in its pool (`proxy.pool.replicas`): the
requests and retries of the last `WINDOW_S` seconds in one-second buckets; a
retry is allowed while retries stay within the endpoint's `budget_percent`
of the requests (or `min_retries`), so a backend that fails as a whole is
sent at most 1 + that share of its offered load. No I/O: the caller gives the
time and the random draw.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from vocabulary.request_path.choosing import Random
from vocabulary.spec.traffic_policy import RetriesConfig, retry_status

__all__ = ["Outcome", "RetryPolicy", "RetryBudget", "WINDOW_S", "DEFAULT_POLICY"]

WINDOW_S = 10  # the retry budget's window, in one-second buckets


class Outcome(enum.Enum):
    """What happened to one try that a retry may fix (a status code is its own outcome)."""

    REPLICA_DIED = "replica-died"
    REPLICA_STALLED = "replica-stalled"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """An endpoint's retry rules as the request path reads them."""

    attempts: int
    methods: frozenset[str]
    outcomes: frozenset[Outcome]
    statuses: frozenset[int]
    budget_percent: float | None  # None: no budget (the rule without a [retries] table)
    min_retries: int = 0
    backoff_s: float = 0.0
    max_backoff_s: float = 0.0

    @classmethod
    def from_config(cls, config: RetriesConfig | None) -> RetryPolicy:
        if config is None:
            return DEFAULT_POLICY
        outcomes = frozenset(o for o in Outcome if o.value in config.retry_on)
        statuses = frozenset(s for o in config.retry_on if (s := retry_status(o)) is not None)
        return cls(
            config.attempts, frozenset(config.methods), outcomes, statuses, config.budget_percent,
            config.min_retries, config.backoff_s, config.max_backoff_s,
        )

    def tries(self, method: str) -> int:
        """How many tries a request of `method` gets in all."""
        return self.attempts if method in self.methods else 1

    def retries_status(self, status: int) -> bool:
        return status in self.statuses

    def backoff(self, retry: int, rng: Random) -> float:
        """The wait before the `retry`-th retry (1-based): drawn in [0, min(max, base * 2^(retry-1)))."""
        if self.backoff_s <= 0:
            return 0.0
        return rng.random() * min(self.max_backoff_s, self.backoff_s * (2 ** (retry - 1)))


DEFAULT_POLICY = RetryPolicy(
    2, frozenset({"GET", "HEAD", "OPTIONS"}), frozenset(Outcome), frozenset(), None,
)


class RetryBudget:
    """One backend's requests and retries over the last `WINDOW_S` seconds (one bucket per second)."""

    __slots__ = ("_requests", "_retries", "_second")

    def __init__(self) -> None:
        self._requests = [0] * WINDOW_S
        self._retries = [0] * WINDOW_S
        self._second = 0  # the whole second of the newest bucket

    def _advance(self, now: float) -> int:
        second = int(now)
        if second != self._second:
            gone = min(second - self._second, WINDOW_S) if second > self._second else WINDOW_S
            for step in range(1, gone + 1):
                index = (self._second + step) % WINDOW_S
                self._requests[index] = 0
                self._retries[index] = 0
            self._second = second
        return second % WINDOW_S

    def requested(self, now: float) -> None:
        """A request's first try was sent."""
        self._requests[self._advance(now)] += 1

    def allows(self, now: float, percent: float, minimum: int) -> bool:
        """Whether one more retry stays within `percent` of the window's requests, or `minimum`."""
        self._advance(now)
        retries = sum(self._retries)
        return retries < minimum or retries + 1 <= sum(self._requests) * percent / 100

    def retried(self, now: float) -> None:
        """A retry was sent."""
        self._retries[self._advance(now)] += 1

    def counts(self, now: float) -> tuple[int, int]:
        """(requests, retries) over the window."""
        self._advance(now)
        return sum(self._requests), sum(self._retries)
