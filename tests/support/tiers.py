"""The test tiers by cost, and the tier of each collected test.

- `pure`: no I/O beyond reading the tree (tests/pure; its conftest fails the
  run if Ray, git, SQLite or HTTP got imported).
- `component`: in-process, no Ray (tests/component, and the tests of
  tests/security and tests/bench that are not marked `real`).
- `real`: a real local Ray, agents, browsers or external programs
  (tests/real, tests/reliability, tests/bench, and anything marked `real`).
- `slow`: real tests that are long by nature (the bench smoke, the short
  soak, the Ray and GCS restarts): named in `SLOW_FILES` or marked `slow`.
  A slow test is a real test too, so `-m "not real"` leaves it out.

`make check` runs `-m "not real and not slow"`; `make test` runs the tiers
in that order, fastest first. `tier_of` is pure: the conftest hook gives it
each test's path and marks.

The real tier runs under pytest-xdist (`--dist loadgroup`): `group_of` puts
each file's tests in one group (one worker, so its module fixtures are built
once), the files named in `SHARED_GROUPS` together, and the files that need
their session's node environment (`NODE_ENV_FILES`) together, handed out first.
A real test that needs the machine to itself is `serial`
(`SERIAL_FILES` or the mark): it runs after the parallel pass, alone.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

TIERS = ("pure", "component", "real", "slow")

# Every test under these folders is real (or slow): they start Ray (the bench
# smoke; the bench's own arithmetic is tested in tests/component).
REAL_FOLDERS = ("tests/real/", "tests/reliability/", "tests/bench/")

# Long by nature: each starts its own Ray (or several) or loads for a minute.
SLOW_FILES = frozenset({
    "tests/bench/test_smoke.py",  # bench.report --tiny: every measurement, each with its own Ray
    "tests/reliability/test_s07_ray_restart.py",  # a Ray head killed and started again
    "tests/reliability/test_s08_gcs_restart.py",  # the GCS killed under load
    "tests/reliability/test_s12_soak.py",  # 45 s of mixed load with seeded faults
})

# Real files that must not share the machine with other tests: they run in a
# serial pass after the parallel one. Each entry says why.
SERIAL_FILES: frozenset[str] = frozenset()

# Folders whose files share session fixtures: one xdist group each, so the
# fixture is built on one worker only.
SHARED_GROUPS = {
    "tests/install/": "tests/install",  # the wheel, built once and installed once for the folder
}

# Real files whose replicas must inherit their session's node environment (the S3 and Hub
# endpoints tests.support.s3 and tests.support.hub set at collection) through `node_env_ray`: the
# runner's shared Ray started before those were set, so their session moves to a Ray of its own.
# They are one xdist group, handed out before any other, so the session holds nothing of the
# shared Ray when it moves (a handle from it would not outlive the move).
NODE_ENV_FILES = frozenset({
    "tests/real/test_automation.py",
    "tests/real/test_capture.py",
    "tests/real/test_init_examples.py",
    "tests/real/test_lora_adapters.py",
    "tests/real/test_models.py",
    "tests/real/test_models_hf.py",
})
NODE_ENV_GROUP = "node-env"

# Fixtures that start Ray or need one started (a test's fixture closure is
# checked, so a fixture built on one of these counts too).
RAY_FIXTURES = frozenset({"ray_session", "node_env_ray", "serving"})

# Calls that start Ray, a Ray head or an agent (`gitops run`) in a test or fixture.
RAY_STARTERS = frozenset({"init_ray", "ray.init", "AgentProcess", "EnvironmentAgent", "RayHead",
                          "start_controller", "start_agent", "serve_shipped_examples", "shared_ray"})


def tier_of(relpath: str, marks: Iterable[str]) -> str:
    """The one tier of a test at `relpath` (repository-relative, `/`-separated)
    carrying the marks named `marks`."""
    marks = set(marks)
    if "slow" in marks or relpath in SLOW_FILES:
        return "slow"
    if "real" in marks or relpath.startswith(REAL_FOLDERS):
        return "real"
    if relpath.startswith("tests/pure/"):
        return "pure"
    return "component"


def is_serial(relpath: str, marks: Iterable[str]) -> bool:
    """Whether the real test at `relpath` carrying `marks` runs alone, after the parallel pass."""
    return "serial" in set(marks) or relpath in SERIAL_FILES


def marks_serial(source: str) -> bool:
    """Whether test module `source` marks a test `serial` (`pytest.mark.serial`, as a decorator or in
    `pytestmark`); a mention in a string or a comment does not count."""
    return any(
        isinstance(node, ast.Attribute) and node.attr == "serial"
        and isinstance(node.value, ast.Attribute) and node.value.attr == "mark"
        for node in ast.walk(ast.parse(source))
    )


# The real tier's groups that took longest (seconds, the clean-clone run of 2026-12-07), handed
# out first, longest first, so the tier does not end on one worker finishing one of them while the
# others idle: xdist's own order is most tests first, which put single-test files of a minute
# (test_apply_backoff, scenario 5) among the last. Groups not named follow in xdist's order.
LONGEST_GROUPS = {
    "tests/real/test_controller.py": 156,
    "tests/real/test_bad_commits.py": 114,
    "tests/install": 110,
    "tests/real/test_agent_e2e.py": 99,
    "tests/real/test_agent_run.py": 74,
    "tests/real/test_routing_policies.py": 72,
    "tests/real/test_apply_backoff.py": 69,
    "tests/real/test_traffic_policy.py": 61,
    "tests/real/test_statuspage_actions.py": 60,
    "tests/real/test_environments_agents.py": 58,
    "tests/reliability/test_s06_git.py": 56,
    "tests/real/test_automation_oci.py": 51,
    "tests/real/test_progressive_delivery.py": 47,
    "tests/reliability/test_s05_agent_kill.py": 45,
    "tests/real/test_promoting_agent.py": 41,
    "tests/real/test_prometheus.py": 39,
    "tests/real/test_backend_errors.py": 37,
    "tests/real/test_proxy_with_controller.py": 37,
    "tests/real/test_autoscaling.py": 36,
    "tests/real/test_placement.py": 34,
    "tests/real/test_agent_rollouts.py": 34,
    "tests/real/test_statuspage.py": 31,
}


def next_group(waiting: Iterable[str]) -> str | None:
    """Of the groups `waiting` (in xdist's order), the one to hand out next when a named long one
    is among them: the `NODE_ENV_GROUP`, else the longest of `LONGEST_GROUPS`; None leaves xdist's order."""
    waiting = list(waiting)
    if NODE_ENV_GROUP in waiting:
        return NODE_ENV_GROUP
    named = [group for group in waiting if group in LONGEST_GROUPS]
    return max(named, key=LONGEST_GROUPS.__getitem__) if named else None


def group_of(relpath: str) -> str:
    """The xdist group of a test at `relpath`: the node-environment group, its folder's shared group,
    else its file."""
    if relpath in NODE_ENV_FILES:
        return NODE_ENV_GROUP
    for folder, group in SHARED_GROUPS.items():
        if relpath.startswith(folder):
            return group
    return relpath


def markers_for(tier: str) -> tuple[str, ...]:
    """The marks the hook adds for `tier`: a slow test is marked real too."""
    return ("slow", "real") if tier == "slow" else (tier,)


def calls_in(source: str) -> set[str]:
    """The names called in `source` (`f(...)` as `f`, `a.f(...)` as `a.f`)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                found.add(func.id)
            elif isinstance(func, ast.Attribute):
                found.add(func.attr)
                if isinstance(func.value, ast.Name):
                    found.add(f"{func.value.id}.{func.attr}")
    return found


def starts_ray(fixture_names: Iterable[str], sources: Iterable[str]) -> list[str]:
    """Why a test with this fixture closure, whose function and fixtures have
    these `sources`, starts Ray (empty when it does not)."""
    why = sorted(set(fixture_names) & RAY_FIXTURES)
    for source in sources:
        why += sorted(calls_in(source) & RAY_STARTERS)
    return sorted(set(why))


def imported_modules(source: str) -> set[str]:
    """The absolute module names `source` imports (`from a.b import c` as `a.b`)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def crossing(importer: str, imported: str) -> bool:
    """Whether test module `importer` (dotted, `tests.real.test_x`) importing
    `imported` imports another test module or a module of another tier's
    folder (tests.support and the top conftest are for everyone)."""
    parts = imported.split(".")
    if parts[0] != "tests" or len(parts) < 3 or parts[1] == "support":
        return False
    if parts[-1].startswith("test_"):
        return True
    return parts[1] != importer.split(".")[1]
