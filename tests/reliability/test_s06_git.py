"""Scenario 6: git goes wrong under a serving cluster.

A remote that refuses, one that accepts and never answers, one that answers
garbage, a force-push during an apply and a deleted branch: serving goes on
with 0 failed requests; a stalled fetch ends at `--fetch-timeout`; status
shows a `GitUnreachable` condition with the error, credentials redacted;
`gitops_last_fetch_success_timestamp_seconds` stops advancing (a shipped
alert watches it); and the agent recovers by itself when the remote does.
Real remotes on loopback: `git http-backend` behind a small HTTP server and
`git daemon`.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pytest
import ray
import yaml

from tests.conftest import GitRepo
from tests.real.support import AgentProcess
from tests.reliability.agents import LOAD_PATH, conditions, write_service
from tests.reliability.gitservers import GitDaemon, HttpGitServer, Mode, Remote
from tests.reliability.load import SteadyLoad
from tests.reliability.scenario import record_run, under_load

FETCH_TIMEOUT_S = 3.0
SECRET = "s3cret-token"
ALERTS = Path(__file__).parents[2] / "monitoring" / "alerts.yml"
LAST_FETCH = "gitops_last_fetch_success_timestamp_seconds"


@dataclass
class World:
    work: GitRepo
    remote: Remote
    agent: AgentProcess
    http: HttpGitServer | None = None

    @property
    def url(self) -> str:
        return self.agent.proxy + LOAD_PATH

    def git_condition(self, reason: str) -> str:
        """The message of the condition with `reason`, once status shows it."""
        found = [c["message"] for c in conditions(self.agent) if c["reason"] == reason]
        return found[0] if found else ""

    def last_fetch_success(self) -> float:
        match = re.search(rf"^{LAST_FETCH} (\S+)$", self.agent.metrics(), re.M)
        return float(match.group(1)) if match else 0.0


def _agent(repo_url: str, workdir: Path) -> AgentProcess:
    workdir.mkdir(parents=True, exist_ok=True)
    return AgentProcess(repo_url, workdir, ray.get_runtime_context().gcs_address,  # type: ignore[arg-type]
                        ["--fetch-timeout", str(FETCH_TIMEOUT_S)])


@pytest.fixture(scope="module")
def world(ray_session: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("git-world")
    work = GitRepo(root / "work")
    remote = Remote(root, work)
    first = write_service(work, "one")
    remote.push()
    http = HttpGitServer(root)
    # Credentials in the URL, as a token often is: they must never be shown.
    agent = _agent(http.url("remote.git").replace("http://", f"http://gitops:{SECRET}@"), root / "agent")
    try:
        agent.wait_applied(first)
        yield World(work, remote, agent, http)
    finally:
        agent.stop()
        http.stop()


def _break_and_recover(
    world: World, row: str, title: str, window_s: float,
    break_remote: Callable[[], None], mend_remote: Callable[[], None], reason: str = "GitUnreachable",
) -> None:
    marks: dict[str, object] = {}

    def fault(_: SteadyLoad) -> float:
        broke = time.monotonic()
        break_remote()
        world.agent.wait(reason, lambda: bool(world.git_condition(reason)), FETCH_TIMEOUT_S + 30)
        marks["detected_s"] = time.monotonic() - broke
        marks["message"] = world.git_condition(reason)
        stale = world.last_fetch_success()
        commit = write_service(world.work, f"after-{row}")
        world.remote.push()
        mended = time.monotonic()
        mend_remote()
        world.agent.wait_applied(commit)
        marks["advanced"] = world.last_fetch_success() > stale
        return time.monotonic() - mended

    report, recovery_s = under_load(world.url, window_s, fault)
    record_run(row, title, report, recovery_s, 0,
               f"{reason} after {marks['detected_s']:.1f} s; recovery = remote back to commit applied")
    assert report.failed == 0, report.summary()
    assert SECRET not in str(marks["message"]) and SECRET not in world.agent.log_path.read_text()
    assert marks["advanced"] is True
    assert not world.git_condition(reason)


def test_a_refusing_remote_shows_git_unreachable_while_serving_and_recovers(world: World, window_s: float) -> None:
    assert world.http is not None
    _break_and_recover(world, "6a", "git remote refuses connections", window_s, world.http.refuse, world.http.start)


def test_a_stalled_remote_is_cut_off_by_the_fetch_timeout_and_recovers(world: World, window_s: float) -> None:
    assert world.http is not None

    def stall() -> None:
        world.http.mode = Mode.STALL

    _break_and_recover(world, "6b", "git remote accepts and never answers", window_s, stall, world.http.serve)


def test_a_remote_answering_garbage_shows_git_unreachable_and_recovers(world: World, window_s: float) -> None:
    assert world.http is not None

    def garbage() -> None:
        world.http.mode = Mode.GARBAGE

    _break_and_recover(world, "6c", "git remote answers garbage", window_s, garbage, world.http.serve)


def test_a_force_push_during_an_apply_converges_on_the_new_head(world: World, window_s: float) -> None:
    def force_push_mid_apply(_: SteadyLoad) -> float:
        write_service(world.work, "slow", start_delay_s=3.0)
        world.remote.push()
        world.agent.wait("applying", lambda: world.agent.get("/status")["status"] == "Progressing", 30)
        pushed = time.monotonic()
        world.work.git("reset", "-q", "--hard", "HEAD~1")
        replacement = write_service(world.work, "replacement")
        world.remote.push(force=True)
        world.agent.wait_applied(replacement)
        return time.monotonic() - pushed

    report, recovery_s = under_load(world.url, window_s, force_push_mid_apply)
    record_run("6d", "force-push during an apply", report, recovery_s, 0, "recovery = force-push to new head applied")
    assert report.failed == 0, report.summary()


def test_a_deleted_branch_keeps_serving_and_recovers_when_pushed_again(
    ray_session: str, tmp_path: Path, window_s: float
) -> None:
    work = GitRepo(tmp_path / "work")
    remote = Remote(tmp_path, work)
    first = write_service(work, "one")
    remote.push()
    daemon = GitDaemon(tmp_path)
    agent = _agent(daemon.url("remote.git"), tmp_path / "agent")
    try:
        agent.wait_applied(first)
        _break_and_recover(World(work, remote, agent), "6e", "git branch deleted (git daemon)", window_s,
                           remote.delete_branch, lambda: None, reason="BranchNotFound")
    finally:
        agent.stop()
        daemon.stop()


def test_a_shipped_alert_fires_when_fetches_stop_succeeding() -> None:
    rules = [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]
    assert [rule["alert"] for rule in rules if LAST_FETCH in rule["expr"]], "no alert on the last successful fetch"
