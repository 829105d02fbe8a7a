"""The report's comparison with the previous run of the proxy benchmark (bench/report.py)."""

from __future__ import annotations

from typing import Any

from bench.report import _headline, headline_figures, merged, with_before


def _run(system: str, median: float, low: float, high: float) -> dict[str, Any]:
    return {"system": system, "handler": "noop", "connections": 32, "rps": {"median": median, "min": low, "max": high},
            "p50_ms": {"median": 1.0, "min": 1.0, "max": 1.0}, "p99_ms": {"median": 3.0, "min": 3.0, "max": 3.0}}


def _document(ours: float, uvicorn: float, finished: str, command: str = "python -m bench.report") -> dict[str, Any]:
    proxy = {"finished_at": finished, "figures": {"runs": [_run("ours", ours, ours - 100, ours + 100),
                                                           _run("uvicorn", uvicorn, uvicorn - 100, uvicorn + 100)]}}
    return {"command": command, "started_at": finished, "measurements": {"proxy": proxy}, "failures": {}}


def test_a_proxy_rerun_is_shown_against_the_previous_run_as_ours_over_uvicorn() -> None:
    previous = _document(20_000, 25_000, "2026-11-26T04:16:11Z")
    rerun = with_before(_document(15_000, 20_000, "2026-11-26T21:00:00Z", "python -m bench.report --only proxy"),
                        previous, ["proxy"])
    document = merged(previous, rerun)
    assert document["before"] == headline_figures(previous)
    text = "\n".join(_headline(document["measurements"], document["before"]))
    assert "(finished 2026-11-26T04:16:11Z): ours 20,000 → 15,000 req/s, bare uvicorn 25,000 → 20,000" in text
    assert "ours ÷ uvicorn 0.80 [0.79–0.81] → 0.75 [0.74–0.76]" in text


def test_a_run_that_did_not_measure_the_proxy_keeps_the_comparison_it_had() -> None:
    previous = with_before(_document(15_000, 20_000, "2026-11-26T21:00:00Z"), _document(1, 2, "earlier"), ["proxy"])
    other = {"command": "python -m bench.report --only audit", "started_at": "x", "measurements": {}, "failures": {}}
    document = merged(previous, with_before(other, previous, ["audit"]))
    assert document["before"] == previous["before"]
    assert with_before(other, {"measurements": {}}, ["proxy"]) is other  # nothing measured before: nothing shown
