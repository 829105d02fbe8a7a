"""The tier runner (tests.support.runner): which pytest runs go side by side, a step whose
jobs run side by side shows each one's output whole and fails with any of them, and the Ray
the real tier's workers share has the logical CPUs their own had together."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.runner import SHARED_RAY_JOBS, _run_step, jobs_of, ray_cpus


def test_the_pure_tier_runs_beside_the_component_tier_and_every_other_run_alone(tmp_path: Path) -> None:
    steps = jobs_of(["pure", "component", "real", "slow"], tmp_path, ["-x"])
    assert [[name for name, _ in step] for step in steps] == [["pure", "component"], ["real"], ["real-serial"],
                                                               ["slow"]]
    pure = steps[0][0][1]
    assert pure[1:3] == ["-m", "pytest"] and f"--junitxml={tmp_path / 'pure.xml'}" in pure and pure[-1] == "-x"
    assert [[name for name, _ in step] for step in jobs_of(["component", "slow"], tmp_path, [])] == [
        ["component"], ["slow"]]


def test_jobs_side_by_side_each_show_their_output_whole_and_a_failing_one_fails(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    step: list[tuple[str, list[str] | str]] = [
        ("lint", "echo lint-1; sleep 0.3; echo lint-2"), ("pure", "echo pure-1; exit 3")]
    outcomes = _run_step(step, tmp_path)
    assert [(name, outcome) for name, _, outcome in outcomes] == [("lint", "passed"), ("pure", "failed (exit 3)")]
    out = capfd.readouterr().out
    # The failing job ended first and is shown first, each job's lines together under its own heading.
    shown = out[out.index("== pure ended"):]  # after the two headings that name the commands
    assert shown.index("== pure ended: failed (exit 3)") < shown.index("\npure-1\n") < shown.index("== lint ended: passed")
    assert shown.index("== lint ended") < shown.index("\nlint-1\nlint-2\n")
    assert (tmp_path / "lint.log").read_text() == "lint-1\nlint-2\n"


def test_only_the_real_tiers_parallel_run_shares_a_ray_with_its_workers_cpus_together() -> None:
    assert SHARED_RAY_JOBS == {"real"}  # the serial pass and the slow tier's tests start their own
    assert ray_cpus("3", 2) == 6
    assert ray_cpus("auto", 2) == 2 and ray_cpus("3", None) == 3
