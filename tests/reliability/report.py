"""Renders the recorded scenario numbers as docs/reports/reliability.md.

`render` is pure (results in, markdown out); `main` reads the JSON-lines
file the scenarios wrote and writes the page. Run by `make reliability`:
the table is produced by a run, never typed by hand.

    python -m tests.reliability.report [RESULTS] [OUTPUT]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tests.support.results import ScenarioResult, load_window_s, read, results_path

__all__ = ["render", "main"]

_INTRO = """# Reliability: what we survive

Each row is one fault injected under steady HTTP load on loopback (keep-alive
clients through the real proxy, real Ray, real git servers), measured by
`tests/reliability/` and written here by `make reliability`
(`tests/reliability/report.py`); do not edit the table by hand.

- **requests / failed**: requests sent during the scenario and those that did
  not get their 200 (a proxy-made status, a refused or reset connection, a timeout).
- **recovery**: seconds from the fault until the system was whole again
  (the scenario's own measure, e.g. a replacement replica running, the proxy
  serving again); "—" where nothing had to recover.
- **leaked actors**: named actors left over or duplicated afterwards.
"""


def _scenario_key(result: ScenarioResult) -> tuple[int, str]:
    match = re.match(r"(\d+)(.*)", result.scenario)
    return (int(match.group(1)), match.group(2)) if match else (10_000, result.scenario)


def _recovery(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f} s"


def _kinds(result: ScenarioResult) -> str:
    return ", ".join(f"{kind} {count}" for kind, count in sorted(result.failures_by_kind.items())) or ""


def render(results: list[ScenarioResult], load_s: float) -> str:
    rows = [
        "| # | scenario | requests | failed | recovery | leaked actors | notes |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for result in sorted(results, key=_scenario_key):
        notes = "; ".join(part for part in (_kinds(result), result.note) if part)
        rows.append(
            f"| {result.scenario} | {result.title} | {result.requests} | {result.failed} "
            f"| {_recovery(result.recovery_s)} | {result.leaked_actors} | {notes} |"
        )
    total_requests = sum(r.requests for r in results)
    total_failed = sum(r.failed for r in results)
    return (
        f"{_INTRO}\n## What we survive\n\nSteady load of {load_s:g} s before each fault and after recovery; "
        f"{total_requests} requests in all, {total_failed} failed.\n\n" + "\n".join(rows) + "\n"
    )


def main(argv: list[str]) -> int:
    source = Path(argv[0]) if argv else results_path()
    target = Path(argv[1]) if len(argv) > 1 else Path("docs/reports/reliability.md")
    results = read(source)
    if not results:
        print(f"no scenario results in {source}", file=sys.stderr)
        return 1
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render(results, load_window_s()))
    print(f"wrote {target}: {len(results)} scenarios")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
