"""Fixtures shared by every tier.

- `repo`: a real git repository in a temp dir, built file by file.
- the tiers: each collected test is marked with its tier (`pure`,
  `component`, `real`, `slow`) from its folder, its marks and the named slow
  files (`tests.support.tiers`), so `-m` selects a tier and no file can be
  forgotten. A real test is also put in its file's xdist group (one worker
  runs a file, so module fixtures are built once), or marked `serial`.
- `ray_session`: one real Ray for the whole test session, in a namespace of
  its own: the Ray the runner holds for all the workers of the real tier's
  parallel run (`tests.support.shared_ray`), or else a local one started on
  first use and shut down at the end. On the shared one, the agents the
  session starts without --namespace get one of their own (GITOPS_NAMESPACE;
  tests find it with `tests.support.stack.agent_namespace`). Its token auth
  is on, as `gitops run`'s, and `RAY_AUTH_MODE` / `RAY_AUTH_TOKEN_PATH` in this process's
  environment let the agents the tests start (`--ray-address`) join it.
- `node_env_ray`: the session's Ray for a module whose replicas must inherit
  the session's node environment (the S3 and Hub endpoints); on the shared
  Ray, which started before they were set, the session moves to a local Ray
  of its own first.
- httpx clients made with the default `verify` share one TLS context
  (`tests.support.httpx_tls`) in a session that runs any test outside the
  pure tier (which must not load httpx): making one per client was a sixth
  of a real test process's CPU.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.support.tiers import group_of, is_serial, markers_for, next_group, tier_of

_ROOT = Path(__file__).resolve().parent.parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks every test with its tier (and a real one with its xdist group, or
    `serial`), before `-m` deselects and before xdist reads the groups."""
    for item in items:
        relpath = Path(str(item.path)).resolve().relative_to(_ROOT).as_posix()
        marks = [mark.name for mark in item.iter_markers()]
        tier = tier_of(relpath, marks)
        for marker in markers_for(tier):
            item.add_marker(marker)
        if tier == "real" and is_serial(relpath, marks) and "serial" not in marks:
            item.add_marker(pytest.mark.serial)
        if tier in ("real", "slow") and "xdist_group" not in marks:
            item.add_marker(pytest.mark.xdist_group(group_of(relpath)))


def pytest_collection_finish(session: pytest.Session) -> None:
    """httpx's clients share one TLS context once a test outside the pure tier is to run."""
    if any(item.get_closest_marker("pure") is None for item in session.items):
        from tests.support.httpx_tls import share_default_tls_context

        share_default_tls_context()


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """Under `--dist loadgroup`, one worker runs each group of `tests.support.tiers.group_of`
    (a file, or a folder sharing session fixtures) whole. xdist's own loadgroup reads
    `xdist_group` marks through a node-id rewrite that pytest 9 no longer honours, so the
    groups are given to its scope scheduler here, the longest known ones first."""
    if config.getoption("dist", None) != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid.split("::", 1)[0])

        def _assign_work_unit(self, node: object) -> None:
            # The longest named group first (tests.support.tiers.LONGEST_GROUPS).
            first = next_group(self.workqueue)
            if first is not None:
                self.workqueue.move_to_end(first, last=False)
            super()._assign_work_unit(node)

    return ByGroup(config, log)


class GitRepo:
    """A real git repository that tests write to and commit in."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", "main")
        self.git("config", "user.email", "tests@example.invalid")
        self.git("config", "user.name", "tests")
        self.git("config", "commit.gpgsign", "false")

    def git(self, *args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=self.root, check=True, capture_output=True, text=True
        )
        return done.stdout.strip()

    def write(self, relpath: str, text: str) -> Path:
        path = self.root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def remove(self, relpath: str) -> None:
        self.git("rm", "-q", "-r", relpath)

    def commit(self, message: str = "change") -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.head()

    def head(self) -> str:
        return self.git("rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    return GitRepo(tmp_path / "repo")


@pytest.fixture(scope="session")
def ray_session(tmp_path_factory: pytest.TempPathFactory):
    """A real Ray shared by the whole session, in its own namespace: the one the runner holds for
    all the run's workers when it gave one (tests.support.shared_ray), else a local one."""
    from controller.cluster import init_ray, shutdown_ray
    from vocabulary.control.goal_api import NAMESPACE_ENV
    from tests.support.shared_ray import ADDRESS

    namespace = f"gitops-test-{uuid.uuid4().hex[:8]}"
    if os.environ.get(ADDRESS):
        init_ray(address=os.environ[ADDRESS], namespace=namespace)
        # The agents this session starts without --namespace: one of its own, not another worker's.
        os.environ[NAMESPACE_ENV] = f"{namespace}-agent"
    else:
        init_ray(address=None, namespace=namespace, state_dir=tmp_path_factory.mktemp("ray-state"))
    yield namespace
    shutdown_ray()


@pytest.fixture(scope="session")
def node_env_ray(ray_session: str, tmp_path_factory: pytest.TempPathFactory):
    """The session's Ray, for the modules whose replicas and proxies must inherit the session's node
    environment: the S3 and Hub endpoints `tests.support.s3` and `tests.support.hub` set at
    collection, as an operator sets them on each node (`tests.support.tiers.NODE_ENV_FILES`). The
    runner's shared Ray started before any of them were set, so on it the session leaves it for a
    local Ray of its own, for the rest of the session: those modules are one xdist group, handed out
    first, so nothing of the shared Ray is held yet (a handle from it would not outlive the switch)."""
    from controller.cluster import init_ray, shutdown_ray
    from tests.support.shared_ray import ADDRESS

    if os.environ.get(ADDRESS):
        shutdown_ray()
        init_ray(address=None, namespace=ray_session, state_dir=tmp_path_factory.mktemp("ray-state"))
    yield ray_session


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    path = Path(os.environ.get("GITOPS_TEST_ARTIFACTS", "test-artifacts"))
    path.mkdir(parents=True, exist_ok=True)
    return path
