"""Request totals per backend, summed over proxies from their cumulative reports.

Each proxy reports its own counts since it started (`RequestStats`), with
its load report. `RequestTotals.absorb` adds what a proxy counted since its
previous report, so totals only grow: a restarted proxy (its counts went
down) contributes everything it counted since, and a proxy that is gone
leaves its share in. Rollouts subtract an earlier total to judge one step.
`absorb_after_first` is for totals a restarted controller begins afresh (the
status's per-endpoint counts): a proxy's first report there is a baseline.
Pure value; the controller keeps it in its checkpoint so a restarted
controller goes on from the same totals.
"""

from __future__ import annotations

from typing import Mapping

from pydantic import BaseModel, ConfigDict, Field

from vocabulary.control.request_stats import RequestStats

__all__ = ["RequestTotals"]


class RequestTotals(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    totals: dict[str, RequestStats] = Field(default_factory=dict)  # backend -> all requests counted
    last: dict[str, dict[str, RequestStats]] = Field(default_factory=dict)  # proxy -> backend -> last report

    def absorb(self, proxy: str, report: Mapping[str, RequestStats]) -> RequestTotals:
        earlier = self.last.get(proxy, {})
        totals = dict(self.totals)
        for backend, stats in report.items():
            increment = stats.since(earlier.get(backend, RequestStats()))
            totals[backend] = totals.get(backend, RequestStats()).plus(increment)
        return RequestTotals(totals=totals, last={**self.last, proxy: dict(report)})

    def absorb_after_first(self, proxy: str, report: Mapping[str, RequestStats]) -> RequestTotals:
        """As `absorb`, but a proxy's first report is only where it starts from: for
        totals not kept across controller restarts, whose proxies are all new to it."""
        if proxy not in self.last:
            return RequestTotals(totals=self.totals, last={**self.last, proxy: dict(report)})
        return self.absorb(proxy, report)

