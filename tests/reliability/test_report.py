"""The reliability table is rendered from recorded numbers, newest run of each scenario."""

from __future__ import annotations

from pathlib import Path

from tests.reliability.report import render
from tests.support.results import ScenarioResult, read, record


def _result(scenario: str, failed: int = 0) -> ScenarioResult:
    return ScenarioResult(scenario, f"fault {scenario}", 100, failed, 1.25, 0, {"reset": failed} if failed else {})


def test_each_recorded_scenario_is_one_row_in_scenario_order() -> None:
    page = render([_result("10a"), _result("2b"), _result("2a")], 1.0)
    rows = [line for line in page.splitlines() if line.startswith("| ") and "fault" in line]
    assert [row.split("|")[1].strip() for row in rows] == ["2a", "2b", "10a"]


def test_a_row_carries_requests_failed_recovery_leaks_and_failure_kinds() -> None:
    page = render([_result("4", failed=3)], 1.0)
    assert "| 4 | fault 4 | 100 | 3 | 1.25 s | 0 | reset 3 |" in page


def test_a_scenario_recorded_twice_keeps_its_newest_numbers(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    record(_result("1", failed=5), path)
    record(_result("1", failed=0), path)
    assert [r.failed for r in read(path)] == [0]
