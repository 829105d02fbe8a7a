"""Which outlier ejections are new for the history ledger (`gitops.status.ejections.EjectionsSeen`): one
shown for the first time is a row; still shown, it is not again; ejected again (its count grown), or by
another worker after the first ejection ended, it is a new row; rows written before a restart whose
ejection may still run count as seen."""

from __future__ import annotations

import pytest

from gitops.reconcile.outcomes import Ejection
from gitops.status.ejections import EjectionsSeen
from vocabulary.control.status import BackendStatus, ReplicaEjection

pytestmark = pytest.mark.pure


def backends(*ejections: tuple[str, str, int]) -> dict[str, BackendStatus]:
    out: dict[str, BackendStatus] = {}
    for backend, replica, count in ejections:
        status = out.get(backend) or BackendStatus(version="v1", target_replicas=3)
        shown = ReplicaEjection(replica_id=replica, reason="5 consecutive errors", count=count, back_in_s=29.6)
        out[backend] = status.model_copy(update={"ejections": (*status.ejections, shown)})
    return out


def keys(rows: list[Ejection]) -> list[tuple[str, str, int]]:
    return [(row.backend, row.replica_id, row.count) for row in rows]


def test_an_ejection_is_new_once_and_not_while_it_lasts() -> None:
    seen = EjectionsSeen()
    rows = seen.new(backends(("chat", "r-3", 1)), now=100.0)
    assert keys(rows) == [("chat", "r-3", 1)]
    assert (rows[0].at, rows[0].reason, rows[0].back_in_s) == (100.0, "5 consecutive errors", 29.6)
    assert seen.new(backends(("chat", "r-3", 1)), now=105.0) == []


def test_ejected_again_or_after_it_ended_is_a_new_row() -> None:
    seen = EjectionsSeen()
    seen.new(backends(("chat", "r-3", 1)), now=100.0)
    assert keys(seen.new(backends(("chat", "r-3", 2)), now=140.0)) == [("chat", "r-3", 2)]
    assert seen.new({}, now=200.0) == []  # it ended
    # Another proxy worker ejects it, its own first time: the same count, but a new ejection.
    assert keys(seen.new(backends(("chat", "r-3", 1)), now=300.0)) == [("chat", "r-3", 1)]


def test_several_backends_and_replicas_in_one_read_in_a_stable_order() -> None:
    rows = EjectionsSeen().new(backends(("tts", "t-1", 1), ("chat", "r-3", 1), ("chat", "r-1", 4)), now=1.0)
    assert keys(rows) == [("chat", "r-3", 1), ("chat", "r-1", 4), ("tts", "t-1", 1)]


def test_rows_written_before_a_restart_whose_ejection_may_run_count_as_seen() -> None:
    seen = EjectionsSeen()
    seen.seed([
        Ejection(at=90.0, backend="chat", replica_id="r-3", count=1, reason="x", back_in_s=30.0),  # runs to 120
        Ejection(at=10.0, backend="chat", replica_id="r-1", count=1, reason="x", back_in_s=30.0),  # ended at 40
    ], now=100.0)
    rows = seen.new(backends(("chat", "r-3", 1), ("chat", "r-1", 1)), now=100.0)
    assert keys(rows) == [("chat", "r-1", 1)]
    seen.seed([], now=200.0)  # seeding again does nothing: the reads already tell
    assert seen.new(backends(("chat", "r-3", 1), ("chat", "r-1", 1)), now=201.0) == []
