"""Scenario 5: kill -9 the agent at each point of an apply — while it exports
the commit, while it waits for goals, as it writes the history — and start
it again: it converges, repeats no action, and the history stays intact.
The data plane serves throughout."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Callable

import ray

from controller.client import connect
from tests.conftest import GitRepo
from tests.support.agents import LOAD_PATH, write_service
from tests.support.load import SteadyLoad
from tests.support.scenario import record_run, under_load
from tests.support.stack import AgentProcess, agent_namespace, eventually, run
from vocabulary.control.status import ReplicaStatus

NEW_VERSION_DELAY_S = 2.0


def _svc_replicas(state: str | None = None) -> list[ReplicaStatus]:
    replicas = run(connect(agent_namespace()).get_status()).backends["svc"].replicas
    return [r for r in replicas if state is None or r.state == state]


def _during_export(agent: AgentProcess, before: set[str]) -> None:
    time.sleep(0.05)  # the ref watch fires within milliseconds; the export follows


def _waiting_for_goals(agent: AgentProcess, before: set[str]) -> None:
    agent.wait("applying", lambda: agent.get("/status")["status"] == "Progressing", 30)


def _writing_history(agent: AgentProcess, before: set[str]) -> None:
    """The moment the new version's goal is met: the agent records it next."""
    def new_version_ready() -> bool:
        replicas = _svc_replicas()
        return len(replicas) == 2 and all(r.state == "RUNNING" and r.replica_id not in before for r in replicas)

    eventually(new_version_ready, 60, interval_s=0.01, what="the new version running")


KILL_POINTS: dict[str, Callable[[AgentProcess, set[str]], None]] = {
    "export": _during_export, "goals": _waiting_for_goals, "history": _writing_history,
}


def test_an_agent_killed_at_each_point_of_an_apply_converges_without_repeating_actions(
    ray_session: str, repo: GitRepo, tmp_path: Path, window_s: float
) -> None:
    address = ray.get_runtime_context().gcs_address
    first = write_service(repo, "one")
    agent = AgentProcess(repo.root, tmp_path, address)
    try:
        agent.wait_applied(first)
        url = agent.proxy + LOAD_PATH
        applied: list[str] = [first]

        def kill_through_three_applies(_: SteadyLoad) -> float:
            nonlocal agent
            started = time.monotonic()
            for code, wait_for_point in zip(("two", "three", "four"), KILL_POINTS.values()):
                before = {r.replica_id for r in _svc_replicas()}
                commit = write_service(repo, code, NEW_VERSION_DELAY_S)
                wait_for_point(agent, before)
                agent.process.kill()
                agent.process.wait(10)
                agent = AgentProcess(repo.root, tmp_path, address)
                agent.wait_applied(commit)
                applied.append(commit)
            return time.monotonic() - started

        report, converged_s = under_load(url, window_s, kill_through_three_applies)
        replicas = _svc_replicas()
        serials = sorted(int(r.replica_id.rsplit("-", 1)[-1]) for r in replicas)
        history = agent.get("/history")
    finally:
        agent.stop()
    with sqlite3.connect(tmp_path / "state" / "history.db") as db:
        integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
    record_run("5", "kill -9 the agent while exporting, waiting for goals, writing history",
               report, converged_s, 0, "recovery = three kill-and-converge cycles")
    assert report.failed == 0, report.summary()
    assert integrity == "ok"
    entries = history if isinstance(history, list) else history["entries"]
    assert {e["commit"] for e in entries if e["result"] in ("applied", "noop")} >= set(applied)
    assert len(replicas) == 2 and all(r.state == "RUNNING" for r in replicas)
    # Two replicas per version, four versions: serials 0..7 and no more (no repeated start).
    assert serials[-1] < 8, serials
