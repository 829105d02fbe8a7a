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

import time
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from tests.conftest import GitRepo
from tests.support.agents import write_service
from tests.support.gitfaults import LAST_FETCH, SECRET, World, break_and_recover, start_agent
from tests.support.gitservers import HttpGitServer, Mode, Remote
from tests.support.load import SteadyLoad
from tests.support.scenario import record_run, under_load

ALERTS = Path(__file__).parents[2] / "monitoring" / "alerts.yml"


@pytest.fixture(scope="module")
def world(ray_session: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("git-world")
    work = GitRepo(root / "work")
    remote = Remote(root, work)
    first = write_service(work, "one")
    remote.push()
    http = HttpGitServer(root)
    # Credentials in the URL, as a token often is: they must never be shown.
    agent = start_agent(http.url("remote.git").replace("http://", f"http://gitops:{SECRET}@"), root / "agent")
    try:
        agent.wait_applied(first)
        yield World(work, remote, agent, http)
    finally:
        agent.stop()
        http.stop()


def test_a_refusing_remote_shows_git_unreachable_while_serving_and_recovers(world: World, window_s: float) -> None:
    assert world.http is not None
    break_and_recover(world, "6a", "git remote refuses connections", window_s, world.http.refuse, world.http.start)


def test_a_stalled_remote_is_cut_off_by_the_fetch_timeout_and_recovers(world: World, window_s: float) -> None:
    assert world.http is not None

    def stall() -> None:
        world.http.mode = Mode.STALL

    break_and_recover(world, "6b", "git remote accepts and never answers", window_s, stall, world.http.serve)


def test_a_remote_answering_garbage_shows_git_unreachable_and_recovers(world: World, window_s: float) -> None:
    assert world.http is not None

    def garbage() -> None:
        world.http.mode = Mode.GARBAGE

    break_and_recover(world, "6c", "git remote answers garbage", window_s, garbage, world.http.serve)


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


def test_a_shipped_alert_fires_when_fetches_stop_succeeding() -> None:
    rules = [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]
    assert [rule["alert"] for rule in rules if LAST_FETCH in rule["expr"]], "no alert on the last successful fetch"
