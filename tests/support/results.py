"""What each reliability scenario measured, appended to one JSON-lines file.

Owns the record of one scenario (`ScenarioResult`), where the file is
(`GITOPS_RELIABILITY_RESULTS`, default test-artifacts/reliability.jsonl),
and how long a scenario keeps its steady load before a fault and after
recovery (`load_window_s`: `GITOPS_RELIABILITY_LOAD_S`, short for
`make test`, long for `make reliability`). `tests.reliability.report`
turns the file into docs/reports/reliability.md; nothing here writes markdown.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["ScenarioResult", "record", "read", "results_path", "load_window_s"]

_DEFAULT_LOAD_S = 1.0


@dataclass(frozen=True)
class ScenarioResult:
    scenario: str  # "1", "2a", ... as numbered in docs/reports/reliability.md
    title: str
    requests: int
    failed: int
    recovery_s: float | None  # None where nothing had to recover
    leaked_actors: int
    failures_by_kind: dict[str, int] = field(default_factory=dict)
    note: str = ""


def results_path() -> Path:
    return Path(os.environ.get("GITOPS_RELIABILITY_RESULTS", "test-artifacts/reliability.jsonl"))


def load_window_s() -> float:
    return float(os.environ.get("GITOPS_RELIABILITY_LOAD_S", _DEFAULT_LOAD_S))


def record(result: ScenarioResult, path: Path | None = None) -> None:
    """Append one scenario's numbers (before the test asserts on them)."""
    target = path or results_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("a") as out:
        out.write(json.dumps(asdict(result), sort_keys=True) + "\n")


def read(path: Path) -> list[ScenarioResult]:
    """Every recorded scenario; a scenario recorded twice keeps its newest numbers."""
    newest: dict[str, ScenarioResult] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            result = ScenarioResult(**json.loads(line))
            newest[result.scenario] = result
    return list(newest.values())
