"""The tiers hold: every test has one tier, and the fast tiers start no Ray.

One `pytest --collect-only` of the whole suite (in a child process, so this
tier imports nothing of it) writes what it collected through
`tests.support.collected`, with each test's marks; the checks read that:

- every test under tests/real, tests/reliability or tests/bench is marked `real` or
  `slow`, and every test carries exactly one tier;
- no test outside `real` and `slow` (what `make check` runs with
  `-m "not real and not slow"`) uses a Ray fixture or calls something that
  starts Ray or an agent; and `-m` sees the tier marks (they are added
  before pytest deselects);
- no test module imports another test module, or a module of another
  tier's folder: what tests share is in tests/support. The imports of test
  modules not yet moved there are listed in `NOT_YET_IN_SUPPORT`; the list
  only shrinks (a new one fails, and so does one that is gone but listed).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.tiers import (
    LONGEST_GROUPS,
    NODE_ENV_FILES,
    NODE_ENV_GROUP,
    REAL_FOLDERS,
    SERIAL_FILES,
    SLOW_FILES,
    TIERS,
    crossing,
    group_of,
    imported_modules,
    is_serial,
    markers_for,
    marks_serial,
    next_group,
    starts_ray,
    tier_of,
)

ROOT = Path(__file__).resolve().parents[2]

# (test file, the test module it imports): helpers still to move to tests/support.
NOT_YET_IN_SUPPORT = {
    ("tests/real/test_agent_rollouts.py", "tests.real.test_agent_e2e"),
    ("tests/real/test_cli_subdirectories.py", "tests.real.test_validate_cli"),
    ("tests/real/test_notifications_http.py", "tests.real.test_agent_loop"),
    ("tests/real/test_rollout_metrics.py", "tests.real.test_progressive_delivery"),
    ("tests/real/test_statuspage_environment.py", "tests.real.test_statuspage"),
    ("tests/real/test_statuspage_links.py", "tests.real.test_statuspage"),
    ("tests/real/test_validate_cli_trees.py", "tests.real.test_validate_cli"),
}


def collect(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
               "-p", "tests.support.collected", *args]
    return subprocess.run(command, cwd=ROOT, env={**os.environ, "GITOPS_COLLECTED": str(out)},
                          capture_output=True, text=True, timeout=240)


def collected(tmp: Path) -> list[dict[str, Any]]:
    out = tmp / "collected.jsonl"
    done = collect(out, "tests")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads(line) for line in out.read_text().splitlines()]


def fast(tests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What `-m "not real and not slow"` keeps."""
    return [test for test in tests if not {"real", "slow"} & set(test["marks"])]


@pytest.fixture(scope="module")
def everything(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return collected(tmp_path_factory.mktemp("collected"))


def test_tests_are_tiered_from_their_folder() -> None:
    assert tier_of("tests/pure/test_x.py", []) == "pure"
    assert tier_of("tests/component/test_x.py", []) == "component"
    assert tier_of("tests/security/test_x.py", []) == "component"
    assert tier_of("tests/security/test_x.py", ["real"]) == "real"
    assert tier_of("tests/real/test_x.py", []) == "real"
    assert tier_of("tests/reliability/test_s01_replica_kill.py", []) == "real"
    assert tier_of("tests/reliability/test_s12_soak.py", ["real"]) == "slow"
    assert tier_of("tests/real/test_x.py", ["slow"]) == "slow"
    assert markers_for("slow") == ("slow", "real")


def test_the_named_slow_files_exist() -> None:
    assert [path for path in SLOW_FILES if not (ROOT / path).is_file()] == []


def test_the_named_serial_files_exist_and_are_real() -> None:
    assert [path for path in SERIAL_FILES if not (ROOT / path).is_file()] == []
    assert [path for path in SERIAL_FILES if tier_of(path, []) != "real"] == []


def test_a_real_file_runs_whole_on_one_worker_and_the_install_folder_together() -> None:
    assert group_of("tests/real/test_x.py") == "tests/real/test_x.py"
    assert group_of("tests/reliability/test_s01_replica_kill.py") == "tests/reliability/test_s01_replica_kill.py"
    assert group_of("tests/install/test_install.py") == group_of("tests/install/test_tutorial.py") == "tests/install"
    assert is_serial("tests/real/test_x.py", ["serial"])
    assert not is_serial("tests/real/test_x.py", ["real"])


def test_the_longest_known_groups_are_handed_out_first_and_exist() -> None:
    waiting = ["tests/real/test_many.py", "tests/real/test_apply_backoff.py", "tests/real/test_controller.py"]
    assert next_group(waiting) == "tests/real/test_controller.py"
    assert next_group(["tests/real/test_many.py", "tests/real/test_apply_backoff.py"]) == \
        "tests/real/test_apply_backoff.py"
    assert next_group(["tests/real/test_many.py"]) is None  # xdist's own order
    assert [group for group in LONGEST_GROUPS if not (ROOT / group).exists()] == []


def test_the_files_needing_the_sessions_node_environment_are_one_group_handed_out_before_any_other() -> None:
    assert {group_of(path) for path in NODE_ENV_FILES} == {NODE_ENV_GROUP}
    assert [path for path in NODE_ENV_FILES if not (ROOT / path).is_file() or tier_of(path, []) != "real"] == []
    assert next_group(["tests/real/test_controller.py", NODE_ENV_GROUP, "tests/real/test_many.py"]) == NODE_ENV_GROUP
    assert not set(NODE_ENV_FILES) & set(LONGEST_GROUPS)  # a file of the group is not a group of its own
    needing = {path.relative_to(ROOT).as_posix() for folder in REAL_FOLDERS for path in (ROOT / folder).rglob("test_*.py")
               if imported_modules(path.read_text()) & {"tests.support.s3", "tests.support.hub"}}
    assert needing == NODE_ENV_FILES
    assert [path for path in NODE_ENV_FILES if "ray_session" in (ROOT / path).read_text()] == []  # node_env_ray


def test_a_test_marked_serial_is_found_in_its_source_and_a_mention_is_not() -> None:
    assert marks_serial("import pytest\n\n@pytest.mark.serial\ndef test_x():\n    pass\n")
    assert marks_serial("import pytest\n\npytestmark = [pytest.mark.real, pytest.mark.serial]\n")
    assert not marks_serial('"""Not marked: pytest.mark.serial is for tests that need the machine."""\n')
    assert not marks_serial("import pytest\n\n@pytest.mark.slow\ndef test_x():\n    pass\n")


def test_every_real_test_is_in_an_xdist_group(everything: list[dict[str, Any]]) -> None:
    real = [test for test in everything if "real" in test["marks"]]
    assert len(real) > 300
    assert [test["nodeid"] for test in real if "xdist_group" not in test["marks"]] == []


def test_a_test_starts_ray_through_a_fixture_or_a_call() -> None:
    assert starts_ray(["tmp_path", "ray_session"], []) == ["ray_session"]
    assert starts_ray(["tmp_path"], ["def f():\n    agent = AgentProcess(x)\n"]) == ["AgentProcess"]
    assert starts_ray([], ["def f():\n    ray.init(address='auto')\n"]) == ["ray.init"]
    assert starts_ray(["repo"], ["def f():\n    return parse('ray.init')\n"]) == []


def test_every_test_has_exactly_one_tier(everything: list[dict[str, Any]]) -> None:
    assert len(everything) > 2000
    allowed = [["pure"], ["component"], ["real"], ["real", "slow"]]
    assert [test["nodeid"] for test in everything if sorted(set(test["marks"]) & set(TIERS)) not in allowed] == []


def test_every_test_under_the_real_folders_is_real_or_slow(everything: list[dict[str, Any]]) -> None:
    under = [test for test in everything if test["path"].startswith(REAL_FOLDERS)]
    assert len(under) > 300
    assert [test["nodeid"] for test in under if not {"real", "slow"} & set(test["marks"])] == []


def test_the_fast_tiers_start_no_ray(everything: list[dict[str, Any]]) -> None:
    assert len(fast(everything)) > 2000
    assert {test["nodeid"]: test["starts_ray"] for test in fast(everything) if test["starts_ray"]} == {}
    # and the check sees the tests that do
    assert sum(1 for test in everything if test["starts_ray"]) > 100


def test_the_tier_marks_are_there_when_pytest_deselects(tmp_path: Path) -> None:
    # tests/reliability has no `real` mark of its own: only the hook's.
    component = "tests/component/test_bench_targets.py"
    done = collect(tmp_path / "c.jsonl", "-m", "not real and not slow", "tests/reliability", component)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    paths = {json.loads(line)["path"] for line in (tmp_path / "c.jsonl").read_text().splitlines()}
    assert paths == {component}


def test_a_test_module_may_import_support_and_its_own_folders_helpers_only() -> None:
    assert not crossing("tests.real.test_x", "tests.support.stack")
    assert not crossing("tests.real.test_x", "tests.conftest")
    assert not crossing("tests.install.test_x", "tests.install.conftest")
    assert not crossing("tests.real.test_x", "controller.cluster")
    assert crossing("tests.real.test_x", "tests.real.test_y")
    assert crossing("tests.security.test_x", "tests.component.test_admin")
    assert crossing("tests.reliability.test_x", "tests.real.apps.proxy_fakes")
    assert imported_modules("import a.b\nfrom c import d\nfrom . import e\n") == {"a.b", "c"}


def test_no_test_module_imports_another_or_another_tiers_folder() -> None:
    found = set()
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        relative = path.relative_to(ROOT)
        importer = ".".join(relative.with_suffix("").parts)
        found |= {(relative.as_posix(), module) for module in imported_modules(path.read_text())
                  if crossing(importer, module)}
    assert sorted(found - NOT_YET_IN_SUPPORT) == [], "move the helpers these import to tests/support"
    assert sorted(NOT_YET_IN_SUPPORT - found) == [], "gone: remove them from NOT_YET_IN_SUPPORT"
