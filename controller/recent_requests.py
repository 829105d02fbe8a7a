"""Each backend's requests over the last minute, from the running request totals.

`RecentRequests` keeps samples of the totals (`controller.request_totals`,
summed over proxies, only ever growing) a few seconds apart for a minute;
`last_minute` is the newest totals minus the oldest sample still within the
window, with the seconds that covers (less than a minute just after the
controller started). `sample` says which backends answered 5xx since the
previous sample, so their replicas are asked for their latest exception at
once. Pure: the clock is passed in (monotonic seconds); nothing is kept across
controller restarts.
"""

from __future__ import annotations

from collections import deque
from typing import Mapping

from vocabulary.request_stats import RequestStats

__all__ = ["RecentRequests", "WINDOW_S"]

WINDOW_S = 60.0
_SAMPLE_EVERY_S = 2.0

Totals = Mapping[str, RequestStats]


class RecentRequests:
    def __init__(self, window_s: float = WINDOW_S, sample_every_s: float = _SAMPLE_EVERY_S) -> None:
        self._window_s = window_s
        self._every_s = sample_every_s
        self._samples: deque[tuple[float, dict[str, RequestStats]]] = deque()
        self._errors_seen: dict[str, int] = {}

    def sample(self, totals: Totals, now: float) -> list[str]:
        """Keep `totals` as of `now` (at most one sample per few seconds), dropping ones
        past the window; the backends whose 5xx count grew since the last sample."""
        if self._samples and now - self._samples[-1][0] < self._every_s:
            return []
        self._samples.append((now, dict(totals)))
        while len(self._samples) > 1 and now - self._samples[1][0] >= self._window_s:
            self._samples.popleft()
        return self._new_errors(totals)

    def last_minute(self, totals: Totals, now: float) -> tuple[float, dict[str, RequestStats]]:
        """(seconds covered, backend -> requests counted in them)."""
        if not self._samples:
            return 0.0, {}
        start, earlier = self._samples[0]
        return now - start, {
            backend: stats.since(earlier.get(backend, RequestStats())) for backend, stats in totals.items()
        }

    def _new_errors(self, totals: Totals) -> list[str]:
        grown = [b for b, stats in sorted(totals.items()) if stats.errors > self._errors_seen.get(b, 0)]
        self._errors_seen = {b: stats.errors for b, stats in totals.items()}
        return grown
