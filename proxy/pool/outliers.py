"""Outlier ejection: which replicas of a backend answer so much worse than the others that they leave routing.

Between a healthy replica and a dead one lies a replica that answers 5xx to
one request in two, or stalls on a thrashing GPU: it passes its health check
and keeps its share of traffic. `OutlierDetector`, one per backend in its
pool (`proxy.pool.replicas`), hears every answered call of the backend's
replicas as a success or an error (a 5xx answer, a handler that raised, a
call past the endpoint's timeout), and applies an endpoint's `[outliers]`
(`vocabulary.spec.traffic_policy.OutliersConfig`) with Envoy's two detectors:

- **consecutive errors**: `consecutive_errors` errors in a row eject the replica;
- **success rate**: every `interval_s`, the success rates of the replicas that
  answered at least `success_rate_min_requests` calls in it (when at least
  `success_rate_min_replicas` did) are compared: one below the mean by more
  than `success_rate_stdev` standard deviations is ejected, when that is also
  more than chance (`CHANCE_ERRORS` standard errors of its own count).

An ejection lasts `base_ejection_s` times the replica's ejections so far (its
third lasts three times its first); at most `max_ejection_percent` of the
backend's replicas are ejected at once (at least one when the share is above
0), never its last routable one. A replica ejected `replace_after` times is
worn out: its `Ejection` says `replace`, and the pool reports it to the
controller, which replaces it as it does a stalled one. When an ejection
ends the replica starts over (its errors in a row and its window forgotten;
its count of ejections kept).

A backend served by several endpoints is judged, at each answer, by the
policy of the endpoint whose request it was. Pure: the caller gives the time;
no asyncio, no Ray.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Collection, Iterable

from vocabulary.spec.traffic_policy import OutliersConfig

__all__ = ["Ejection", "OutlierDetector", "ejections_allowed", "CHANCE_ERRORS"]

# A success rate below the others by less than this many binomial standard errors (of the
# replica's calls at the backend's mean rate) may be chance: six replicas failing 10 % alike
# would otherwise lose one to noise in one interval of five (k = 1.9, 100 calls each).
CHANCE_ERRORS = 3.0


@dataclass(frozen=True, slots=True)
class Ejection:
    """A replica out of routing until `until`: why, and its how-manieth ejection this is."""

    replica_id: str
    reason: str  # "5 consecutive errors", "success rate 52% over 10 s, its backend's mean 84%"
    count: int  # the replica's ejections so far, this one included
    at: float  # when it was ejected
    until: float
    replace: bool  # worn out: ejected `replace_after` times, for the controller to replace

    def message(self, now: float) -> str:
        """`replica r-3 ejected: 5 consecutive errors, back in 30 s` (its count when ejected before)."""
        back = max(0, math.ceil(self.until - now))
        times = "" if self.count == 1 else f" (ejection {self.count})"
        tail = "; replaced by the controller" if self.replace else f", back in {back} s"
        return f"replica {self.replica_id} ejected{times}: {self.reason}{tail}"


def ejections_allowed(replicas: int, percent: float) -> int:
    """How many of `replicas` may be ejected at once: `percent` of them rounded down, at least one
    when `percent` is above 0, and never all of them."""
    if percent <= 0 or replicas < 2:
        return 0
    return min(replicas - 1, max(1, int(replicas * percent / 100)))


class _Replica:
    __slots__ = ("errors_in_a_row", "answered", "failed", "ejections")

    def __init__(self) -> None:
        self.errors_in_a_row = 0
        self.answered = 0  # calls answered in the current interval
        self.failed = 0  # of which errors
        self.ejections = 0  # since the proxy started


class OutlierDetector:
    """One backend's replicas as the outlier rules judge them, and the ones ejected now."""

    __slots__ = ("_replicas", "_ejected", "_interval_started", "_next_end", "ejections")

    def __init__(self) -> None:
        self._replicas: dict[str, _Replica] = {}
        self._ejected: dict[str, Ejection] = {}
        self._interval_started: float | None = None
        self._next_end = math.inf  # the earliest `until` of the ejections now
        self.ejections = 0  # ejections made since the proxy started

    # --- what routing reads --------------------------------------------------------

    def any(self) -> bool:
        """Whether a replica is (or was, until `ejected` is next asked) ejected: routing skips the clock when not."""
        return bool(self._ejected)

    def ejected(self, now: float) -> dict[str, Ejection]:
        """The ejections in force at `now` (ended ones are forgotten, their replicas start over)."""
        if now >= self._next_end:
            for replica_id, ejection in list(self._ejected.items()):
                if ejection.until <= now and not ejection.replace:
                    del self._ejected[replica_id]
                    replica = self._replicas.get(replica_id)
                    if replica is not None:
                        replica.errors_in_a_row = replica.answered = replica.failed = 0
            self._next_end = min((e.until for e in self._ejected.values() if not e.replace), default=math.inf)
        return self._ejected

    def worn_out(self) -> dict[str, Ejection]:
        """The replicas ejected `replace_after` times, for the controller to replace (kept out until it does)."""
        return {rid: e for rid, e in self._ejected.items() if e.replace}

    # --- what the request path tells ------------------------------------------------

    def members(self, replica_ids: Collection[str]) -> None:
        """The backend's replicas now: the others (gone, replaced) are forgotten."""
        for gone in set(self._replicas) - set(replica_ids):
            del self._replicas[gone]
        for gone in set(self._ejected) - set(replica_ids):
            del self._ejected[gone]

    def answered(
        self, replica_id: str, failed: bool, now: float, config: OutliersConfig, members: Collection[str],
    ) -> list[Ejection]:
        """A call to `replica_id` ended in a success or an error (`failed`), under the endpoint's `config`;
        `members`: the backend's replicas now. The ejections this makes (often none)."""
        current = self.ejected(now)
        replica = self._replicas.get(replica_id)
        if replica is None:
            replica = self._replicas[replica_id] = _Replica()
        made: list[Ejection] = []
        if replica_id not in current:
            replica.answered += 1
            if failed:
                replica.failed += 1
                replica.errors_in_a_row += 1
                if 0 < config.consecutive_errors <= replica.errors_in_a_row:
                    ejection = self._eject(replica_id, f"{replica.errors_in_a_row} consecutive errors", now,
                                           config, members)
                    if ejection is not None:
                        made.append(ejection)
            else:
                replica.errors_in_a_row = 0
        if self._interval_started is None:
            self._interval_started = now
        elif now - self._interval_started >= config.interval_s:
            made.extend(self._compare_success_rates(now, config, members))
            self._interval_started = now
            for counts in self._replicas.values():
                counts.answered = counts.failed = 0
        return made

    # --- the rules ---------------------------------------------------------------------

    def _compare_success_rates(self, now: float, config: OutliersConfig, members: Collection[str]) -> Iterable[Ejection]:
        if config.success_rate_stdev <= 0:
            return []
        rates = {
            rid: 1 - counts.failed / counts.answered
            for rid, counts in self._replicas.items()
            if rid in members and rid not in self._ejected and counts.answered >= config.success_rate_min_requests
        }
        if len(rates) < config.success_rate_min_replicas:
            return []
        mean = sum(rates.values()) / len(rates)
        stdev = math.sqrt(sum((rate - mean) ** 2 for rate in rates.values()) / len(rates))
        made = []
        for rid, rate in sorted(rates.items(), key=lambda item: item[1]):
            # Below by k deviations, and by more than chance: CHANCE_ERRORS standard errors of its own count.
            chance = CHANCE_ERRORS * math.sqrt(mean * (1 - mean) / self._replicas[rid].answered)
            if stdev <= 0 or rate >= mean - max(config.success_rate_stdev * stdev, chance):
                break
            reason = (f"success rate {rate:.0%} over {config.interval_s:g} s, its backend's mean "
                      f"{mean:.0%}")
            ejection = self._eject(rid, reason, now, config, members)
            if ejection is None:
                break
            made.append(ejection)
        return made

    def _eject(
        self, replica_id: str, reason: str, now: float, config: OutliersConfig, members: Collection[str],
    ) -> Ejection | None:
        routable = [rid for rid in members if rid not in self._ejected]
        if replica_id not in routable:
            return None
        if len(members) - len(routable) >= ejections_allowed(len(members), config.max_ejection_percent):
            return None  # the bound on a backend's ejected share: this replica keeps its traffic
        replica = self._replicas[replica_id]
        replica.ejections += 1
        self.ejections += 1
        replace = 0 < config.replace_after <= replica.ejections
        until = now + config.base_ejection_s * replica.ejections
        ejection = Ejection(replica_id, reason, replica.ejections, now, until, replace)
        self._ejected[replica_id] = ejection
        if not replace:
            self._next_end = min(self._next_end, until)
        return ejection
