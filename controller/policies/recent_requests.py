"""Each backend's requests over the last minute, from the running request totals.

`RecentRequests` keeps samples of the totals (`controller.policies.request_totals`,
summed over proxies, only ever growing) a few seconds apart for a minute;
`last_minute` is the newest totals minus the oldest sample still within the
window, with the seconds that covers (less than a minute just after the
controller started). A backend whose replicas all came to run a new version
(`new_version`) is counted from the totals as they stood when that was seen
instead, with the seconds since (`shorter_windows`): what its old code
answered says nothing of what serves now, so a fixed backend stops showing as
erring once the fix serves, not a minute later. `sample` says which backends answered 5xx since the previous
sample, so their replicas are asked for their latest exception at once.
Pure: the clock is passed in (monotonic seconds); nothing is kept across
controller restarts.
"""

from __future__ import annotations

from collections import deque
from typing import Mapping

from vocabulary.control.request_stats import RequestStats

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
        # Backend -> where its new version is counted from: when, and the backend's totals then.
        self._fresh: dict[str, tuple[float, RequestStats]] = {}

    def new_version(self, backend: str, totals: Totals, now: float) -> None:
        """Every replica of `backend` runs a new version as of `now`, when the totals were `totals`:
        count its requests from there on. Seen in the tick the change happened (not at the next
        sample), so none of the new version's answers are lost, and the old version's count only
        as far as they were reported late (one load report, half a second)."""
        self._fresh[backend] = (now, totals.get(backend, RequestStats()))

    def due(self, now: float) -> bool:
        """Whether `sample` would keep a sample now (one per few seconds)."""
        return not self._samples or now - self._samples[-1][0] >= self._every_s

    def sample(self, totals: Totals, now: float) -> list[str]:
        """Keep `totals` as of `now` (at most one sample per few seconds), dropping ones
        past the window; the backends whose 5xx count grew since the last sample."""
        if not self.due(now):
            return []
        self._samples.append((now, dict(totals)))
        while len(self._samples) > 1 and now - self._samples[1][0] >= self._window_s:
            self._samples.popleft()
        start = self._samples[0][0]
        self._fresh = {backend: fresh for backend, fresh in self._fresh.items() if fresh[0] > start}
        return self._new_errors(totals)

    def last_minute(self, totals: Totals, now: float) -> tuple[float, dict[str, RequestStats]]:
        """(seconds covered, backend -> requests counted in them); a backend in
        `shorter_windows` is counted over its own, shorter, seconds."""
        if not self._samples:
            return 0.0, {}
        start, earlier = self._samples[0]
        return now - start, {
            backend: stats.since(self._base(backend, start, earlier)) for backend, stats in totals.items()
        }

    def shorter_windows(self, now: float) -> dict[str, float]:
        """Backend -> the seconds it is counted over, for those whose version changed within the window."""
        start = self._samples[0][0] if self._samples else now
        return {backend: now - when for backend, (when, _) in self._fresh.items() if when > start}

    def _base(self, backend: str, start: float, earlier: Mapping[str, RequestStats]) -> RequestStats:
        fresh = self._fresh.get(backend)
        if fresh is not None and fresh[0] > start:
            return fresh[1]
        return earlier.get(backend, RequestStats())

    def _new_errors(self, totals: Totals) -> list[str]:
        grown = [b for b, stats in sorted(totals.items()) if stats.errors > self._errors_seen.get(b, 0)]
        self._errors_seen = {b: stats.errors for b, stats in totals.items()}
        return grown
