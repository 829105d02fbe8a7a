"""The numbers a promotion is judged on: requests, 5xx and shadow comparisons, as the controller holds them.

Each proxy counts every answer and every shadow reply compared, per
endpoint, and reports them to the controller with its load (the one route
request outcomes take: rollouts read the same reports, per backend); the
controller adds up every proxy's reports (`controller.client.ControllerClient.endpoint_totals`).
`of_totals` (pure) reads those per-endpoint totals into `Counts`. The totals
are cumulative since the proxies started: the promotion subtracts the counts
taken when the commit began to serve (`Counts.since`). A controller that
does not answer gives no counts: a gate is never passed on partial numbers.
Must not: decide anything (`gitops.delivery.gates` does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from vocabulary.control.request_stats import RequestStats

__all__ = ["Counts", "of_totals"]


@dataclass(frozen=True)
class Counts:
    requests: int = 0
    errors: int = 0  # 5xx answers
    compared: int = 0  # shadow replies compared
    mismatched: int = 0

    def plus(self, other: Counts) -> Counts:
        return Counts(
            self.requests + other.requests, self.errors + other.errors,
            self.compared + other.compared, self.mismatched + other.mismatched,
        )

    def since(self, earlier: Counts) -> Counts:
        """What was counted after `earlier`; a counter that went down restarted: all of it is new."""
        if self.requests < earlier.requests or self.compared < earlier.compared:
            return self
        return Counts(
            self.requests - earlier.requests, max(0, self.errors - earlier.errors),
            self.compared - earlier.compared, max(0, self.mismatched - earlier.mismatched),
        )


def of_totals(totals: Mapping[str, RequestStats]) -> Counts:
    """Every endpoint's totals (`endpoint_totals`) added up as counts."""
    total = Counts()
    for stats in totals.values():
        total = total.plus(Counts(stats.requests, stats.errors, stats.compared, stats.mismatched))
    return total
