"""What the proxies' outlier ejections mean for the history ledger: each one a row, once.

The controller's status lists, per backend, the replicas a proxy holds
ejected now (`vocabulary.control.status.ReplicaEjection`: the replica, its
ejections so far, why, how long it stays out). An ejection shows in every
status read while it lasts, so `EjectionsSeen.new` keeps the ones the last
read showed, by (backend, replica, ejection count), and answers only those
that were not there: each ejection becomes one `Ejection` row, and a replica
ejected again (its count grown, or by another proxy worker once the first
ejection ended) a new one. An agent that starts afresh knows the rows it
wrote before (`seed`): an ejection still running then is not written twice.

Pure: the agent passes the status, the rows and the clock.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from gitops.reconcile.outcomes import Ejection
from vocabulary.control.status import BackendStatus

__all__ = ["EjectionsSeen"]

_Key = tuple[str, str, int]  # backend, replica id, ejection count


class EjectionsSeen:
    """The ejections the last status read showed, to tell a new one from one still running."""

    def __init__(self) -> None:
        self._shown: set[_Key] | None = None  # None: no status read yet

    def seed(self, recorded: Iterable[Ejection], now: float) -> None:
        """Before the first read: the rows written before whose ejection may still run, as already seen."""
        if self._shown is None:
            self._shown = {
                (row.backend, row.replica_id, row.count) for row in recorded if row.at + row.back_in_s >= now
            }

    def new(self, backends: Mapping[str, BackendStatus], now: float) -> list[Ejection]:
        """The ejections `backends` show that the last read did not, as rows at `now` (by backend, replica)."""
        shown: dict[_Key, Ejection] = {}
        for backend in sorted(backends):
            for ejection in backends[backend].ejections:
                key = (backend, ejection.replica_id, ejection.count)
                shown[key] = Ejection(at=now, backend=backend, replica_id=ejection.replica_id, count=ejection.count,
                                      reason=ejection.reason, back_in_s=ejection.back_in_s)
        before = self._shown or set()
        self._shown = set(shown)
        return [row for key, row in shown.items() if key not in before]
