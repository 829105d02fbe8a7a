"""Runs the test tiers, fastest first, and says where the time went.

`python -m tests.support.runner pure component real slow` runs each tier as
its own pytest (the pure tier alone in its process, so its conftest can
check that it loaded no Ray, git, SQLite or HTTP). The pure tier runs beside
the component tier, and `--alongside CMD` (the static checks) beside both:
each of those writes to test-artifacts/tiers/NAME.log, shown whole when it
ends; every later tier streams its output as it runs. The run goes on after
a failing tier so one run shows every failure, and ends with the time of
each tier and the 30 slowest tests of the whole run (from each tier's JUnit
XML under test-artifacts/tiers/). A tier that collects nothing (pytest's
exit 5) is empty, not failed; the real tier's serial pass is skipped, empty,
when no test can be serial. `--before-real CMD` runs CMD (the system
packages) just before the first real or slow tier, so the fast tiers do not
wait for it. Exits non-zero when a tier (or the command alongside) failed.

The component tier runs on `GITOPS_CHECK_WORKERS` xdist workers (default
2, one per core; the pure tier runs in one process, as its conftest checks
what the session imported). The real tier is two pytest runs: its tests on
`GITOPS_TEST_WORKERS` xdist workers (default 3: most real tests wait on
Ray, so they overlap well on two cores), each file on one worker (`--dist loadgroup`, groups from
tests.support.tiers), all joined to one Ray the runner holds for the run
(tests.support.shared_ray), then its `serial` tests alone. The slow tier runs on
`GITOPS_SLOW_TEST_WORKERS` (default 2) the same way.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from tests.support import tiers
from tests.support.shared_ray import shared_ray

# The component tier on two workers: 1,410 tests of about 0.1 s each, CPU-bound, one per core.
CHECK_WORKERS = os.environ.get("GITOPS_CHECK_WORKERS", "2")
WORKERS = os.environ.get("GITOPS_TEST_WORKERS", "3")
# The slow tier on two workers: the bench smoke (its own group, ~4 minutes) beside the
# restart scenarios and the soak (~2.5 minutes together), instead of after them.
SLOW_WORKERS = os.environ.get("GITOPS_SLOW_TEST_WORKERS", "2")

# What each tier runs: one or more pytest runs, by name, each with its
# arguments after `-q -p no:cacheprovider`.
TIER_ARGS = {
    "pure": {"pure": ["-m", "pure", "tests/pure"]},
    "component": {"component": ["-m", "component", "-n", CHECK_WORKERS, "tests", "--ignore=tests/pure"]},
    "real": {
        "real": ["-m", "real and not slow and not serial", "-n", WORKERS, "--dist", "loadgroup",
                 "tests", "--ignore=tests/pure"],
        "real-serial": ["-m", "real and not slow and serial", "tests", "--ignore=tests/pure"],
    },
    "slow": {"slow": ["-m", "slow", "-n", SLOW_WORKERS, "--dist", "loadgroup", "tests", "--ignore=tests/pure"]},
}
NO_TESTS_COLLECTED = 5
SLOWEST = 30
# Tiers whose pytest runs go side by side when one follows the other.
SIDE_BY_SIDE = frozenset({"pure", "component"})
# The pytest runs that need the system packages (`--before-real`).
REAL_JOBS = frozenset({"real", "real-serial", "slow"})
# The pytest runs whose xdist workers share one Ray (tests.support.shared_ray) instead of a Ray each,
# with as many logical CPUs as theirs together. Not the slow tier: its tests start Rays of their own.
SHARED_RAY_JOBS = frozenset({"real"})


def slowest(reports: list[Path], count: int = SLOWEST) -> list[tuple[float, str]]:
    """The `count` longest tests (setup, call and teardown) in these JUnit XML files."""
    times: list[tuple[float, str]] = []
    for report in reports:
        if not report.is_file():
            continue
        for case in ET.parse(report).iter("testcase"):
            name = f"{case.get('classname')}::{case.get('name')}"
            times.append((float(case.get("time") or 0.0), name))
    return sorted(times, reverse=True)[:count]


def serial_tests_exist(tests: Path) -> bool:
    """Whether any test can be `serial`: a file named in `tiers.SERIAL_FILES`, or one marking a test
    so. Without one, the serial pass is skipped: it would collect the whole suite to run nothing (15 s)."""
    return bool(tiers.SERIAL_FILES) or any(tiers.marks_serial(path.read_text()) for path in tests.rglob("test_*.py"))


def junit_xml(artifacts: Path, name: str) -> Path:
    """Where the pytest run `name` writes its JUnit XML."""
    return artifacts / f"{name}.xml"


def report_of(artifacts: Path, name: str, command: list[str] | str) -> Path | None:
    """The JUnit XML a job writes: a pytest run's, none for a shell command."""
    return junit_xml(artifacts, name) if isinstance(command, list) else None


def jobs_of(tiers_asked: list[str], artifacts: Path, extra: list[str]) -> list[list[tuple[str, list[str] | str]]]:
    """The run as steps, each a list of (name, pytest arguments or a shell command) run side by side:
    the pure tier beside the component tier (one process beside two workers: the component tier
    leaves a core idle a third of its time), every other pytest run of a tier a step of its own."""
    steps: list[list[tuple[str, list[str] | str]]] = []
    for tier in tiers_asked:
        for name, tier_args in TIER_ARGS[tier].items():
            command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                       f"--junitxml={junit_xml(artifacts, name)}",
                       "-o", "junit_family=xunit1", *tier_args, *extra]
            if steps and tier in SIDE_BY_SIDE and {job for job, _ in steps[-1]} <= SIDE_BY_SIDE:
                steps[-1].append((name, command))
            else:
                steps.append([(name, command)])
    return steps


def _start(name: str, command: list[str] | str, log: Path | None,
           env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], Any]:
    """Start a job: its output to `log` when it runs beside others, else to this terminal."""
    if isinstance(command, list):
        print(f"\n== tier {name}: {shlex.join(command[1:])}", flush=True)
    else:
        print(f"\n== {name}: {command}", flush=True)
    out = open(log, "wb") if log is not None else None
    shell = isinstance(command, str)
    return subprocess.Popen(command, shell=shell, stdout=out, stderr=subprocess.STDOUT if out else None,
                            env=env), out


def ray_cpus(workers: str, cores: int | None) -> int:
    """The logical CPUs of a Ray shared by `workers` xdist workers: what their own Rays had together
    (each one the machine's cores)."""
    return max(1, int(workers) if workers.isdigit() else 1) * max(1, cores or 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tiers", nargs="+", choices=sorted(TIER_ARGS))
    parser.add_argument("--before-real", default="", help="a command to run before the first real or slow tier")
    parser.add_argument("--alongside", default="", help="a command (the static checks) run beside the first step")
    parser.add_argument("--artifacts", type=Path, default=Path("test-artifacts/tiers"))
    argv = sys.argv[1:] if argv is None else argv
    ours, extra = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    args = parser.parse_args(ours)  # after `--`: more pytest arguments, for every tier
    args.artifacts.mkdir(parents=True, exist_ok=True)
    results: list[tuple[str, float, str]] = []
    reports: list[Path] = []
    before = args.before_real
    alongside: list[tuple[str, list[str] | str]] = [("lint", args.alongside)] if args.alongside else []
    run_started = time.monotonic()
    for step in jobs_of(args.tiers, args.artifacts, extra):
        if any(name in REAL_JOBS for name, _ in step) and before:
            print(f"\n== before the real tiers: {before}", flush=True)
            if subprocess.run(before, shell=True).returncode != 0:
                results.append(("system packages", 0.0, "failed"))
                break
            before = ""
        if step[0][0] == "real-serial" and not serial_tests_exist(Path("tests")):
            print("\n== tier real-serial: no test is serial (tests.support.tiers), skipped", flush=True)
            results.append(("real-serial", 0.0, "empty"))
            continue
        step, alongside = [*alongside, *step], []
        results.extend(_run_step(step, args.artifacts))
        reports.extend(report for name, command in step if (report := report_of(args.artifacts, name, command)))
    print(f"\n== the {SLOWEST} slowest tests")
    for seconds, name in slowest(reports):
        print(f"{seconds:8.2f}s  {name}")
    print("\n== time per tier (those side by side overlap)")
    for tier, elapsed, outcome in results:
        print(f"{tier:>16}  {int(elapsed) // 60:3d}:{int(elapsed) % 60:02d}  {outcome}")
    total = time.monotonic() - run_started
    print(f"{'total':>16}  {int(total) // 60:3d}:{int(total) % 60:02d}")
    return 0 if all(outcome in ("passed", "empty") for _, _, outcome in results) else 1


def _run_step(step: list[tuple[str, list[str] | str]], artifacts: Path) -> list[tuple[str, float, str]]:
    """Run a step's jobs side by side; a job beside others writes to its log, shown whole when it ends."""
    for name, command in step:
        if report := report_of(artifacts, name, command):
            report.unlink(missing_ok=True)
    logged = len(step) > 1
    started = time.monotonic()  # the shared Ray's start counts in its tier's time
    with contextlib.ExitStack() as held:
        env: dict[str, dict[str, str]] = {}
        for name, _ in step:
            if name in SHARED_RAY_JOBS:
                try:
                    joining = held.enter_context(shared_ray(ray_cpus(WORKERS, os.cpu_count())))
                except RuntimeError as error:
                    print(f"\n== tier {name}: {error}", flush=True)
                    return [(job, time.monotonic() - started, "failed (no shared Ray)") for job, _ in step]
                env[name] = {**os.environ, **joining}
        return _run_jobs(step, artifacts, logged, env, started)


def _run_jobs(step: list[tuple[str, list[str] | str]], artifacts: Path, logged: bool,
              env: dict[str, dict[str, str]], started: float) -> list[tuple[str, float, str]]:
    """Start the jobs (each with its environment in `env`, else this one), and wait for them all."""
    running = {name: _start(name, command, artifacts / f"{name}.log" if logged else None, env.get(name))
               for name, command in step}
    outcomes: dict[str, tuple[float, str]] = {}
    while running:
        for name, (process, out) in list(running.items()):
            code = process.poll() if logged else process.wait()
            if code is None:
                continue
            del running[name]
            outcomes[name] = (time.monotonic() - started,
                              "passed" if code == 0 else "empty" if code == NO_TESTS_COLLECTED else f"failed (exit {code})")
            if out is not None:
                out.close()
                print(f"\n== {name} ended: {outcomes[name][1]}; its output:", flush=True)
                sys.stdout.buffer.write((artifacts / f"{name}.log").read_bytes())
                sys.stdout.flush()
        time.sleep(0.2 if running else 0)
    return [(name, *outcomes[name]) for name, _ in step]


if __name__ == "__main__":
    sys.exit(main())
