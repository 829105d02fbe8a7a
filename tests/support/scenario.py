"""One scenario's shape: steady load, a fault, recovery, steady load, record.

Owns the order every scenario follows, so that the numbers in the table
mean the same thing on every row: the load runs `window_s` before the fault
and `window_s` after the fault's own measure of recovery returns; then the
numbers are recorded (before the test asserts, so a failing run still shows
in the table).
"""

from __future__ import annotations

import time
from typing import Callable

from tests.support.load import LoadReport, SteadyLoad
from tests.support.results import ScenarioResult, record
from tests.support.stack import eventually

__all__ = ["under_load", "record_run"]

Fault = Callable[[SteadyLoad], float | None]  # injects the fault, waits for recovery, returns its seconds


def under_load(url: str, window_s: float, fault: Fault, clients: int = 8) -> tuple[LoadReport, float | None]:
    with SteadyLoad(url, clients=clients) as load:
        eventually(load.last_success, 30, what=f"a first 200 from {url}")
        time.sleep(window_s)  # the steady load before the fault (its length is the point)
        recovery_s = fault(load)
        time.sleep(window_s)  # and after recovery
        report = load.stop()
    return report, recovery_s


def record_run(
    scenario: str, title: str, report: LoadReport, recovery_s: float | None, leaked: int, note: str = ""
) -> ScenarioResult:
    result = ScenarioResult(
        scenario=scenario, title=title, requests=report.requests, failed=report.failed,
        recovery_s=None if recovery_s is None else round(recovery_s, 2), leaked_actors=leaked,
        failures_by_kind=report.by_kind(), note=note,
    )
    record(result)
    return result
