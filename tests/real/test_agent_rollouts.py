"""End to end: a canary commit in a real git repository is rolled out, judged and aborted;
--auto-revert and `gitops rollback` return the cluster to a good commit.

The real agent, controller and proxy (the session's Ray, loopback HTTP):
a commit moving an endpoint's traffic to a backend that fails 20% of its
requests is stopped at its first step by the proxy's own counts; history
records the commit as aborted with the check and its measured value, the
status says Degraded / RolloutAborted, and traffic is back on the old version.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from gitops.reconcile.outcomes import Outcome
from gitops.status.rollup import SyncStatus
from tests.real.test_agent_e2e import (  # noqa: F401 (cluster, empty_cluster: fixtures)
    RequestLoop,
    RunningAgent,
    applied,
    cluster,
    empty_cluster,
    make_agent,
    wait_for,
)
from tests.support.stack import free_port

pytestmark = pytest.mark.real

APP = '''
class Greeter:
    def __init__(self, label):
        self.label = label
        self.error_share = 0.0
        self.answered = 0

    def reconfigure(self, user_config):
        self.error_share = float(user_config.get("error_share", 0.0))

    def __call__(self, request):
        from starlette.responses import JSONResponse
        self.answered += 1
        failing = int(self.answered * self.error_share) > int((self.answered - 1) * self.error_share)
        return JSONResponse({"label": self.label}, status_code=500 if failing else 200)
'''


def canary_toml(tag: str, traffic: str, canary_errors: float = 0.2, rollout: bool = True) -> str:
    backends = "".join(
        f'[backends.{tag}-{label}]\nimport_path = "deployments.apps.greeter:Greeter"\ninit_args = ["{label}"]\n'
        f"user_config = {{ error_share = {share} }}\nray_actor_options = {{ num_cpus = 0.01 }}\n"
        "graceful_shutdown_timeout_s = 1\n\n"
        for label, share in (("v1", 0.0), ("v2", canary_errors))
    )
    endpoint = f'[endpoints.greet]\nroute = "/greet"\ntraffic = {{ {traffic} }}\n\n'
    steps = "[endpoints.greet.rollout]\nsteps = [0.5, 1.0]\nstep_interval_s = 10\nmin_requests = 10\nmax_error_ratio = 0.05\n"
    return backends + endpoint + (steps if rollout else "")


def write_greeter_app(repo) -> None:
    """The greeter app (APP) at deployments/apps/greeter.py, importable as a package."""
    repo.write("deployments/__init__.py", "")
    repo.write("deployments/apps/__init__.py", "")
    repo.write("deployments/apps/greeter.py", APP)


def reverting_agent(repo, state_dir: Path, client, auto_revert: bool):
    """`make_agent` with a quarantine file, and `--auto-revert` when asked."""
    return make_agent(repo, state_dir, client, auto_revert=auto_revert, quarantine_file=state_dir / "quarantine.json")


def labels_after(load: RequestLoop, count: int = 30) -> set[str]:
    """The labels of `count` answers that come after this moment, skipping the first few in flight."""
    seen = len(load.bodies)
    wait_for(lambda: len(load.bodies) >= seen + count, 30, what=f"{count} answers")
    return {body["label"] for body in load.bodies[seen + 5:]}


def test_a_canary_commit_failing_a_fifth_of_its_requests_is_aborted_and_recorded(
    repo, tmp_path: Path, empty_cluster
) -> None:
    client, url, _ = empty_cluster
    tag = f"t{uuid.uuid4().hex[:6]}"
    write_greeter_app(repo)
    repo.write("deployments/greet.toml", canary_toml(tag, f'"{tag}-v1" = 1.0'))
    repo.commit("v1 serves")
    running = RunningAgent(make_agent(repo, tmp_path / "state", client))
    try:
        agent = running.agent
        wait_for(lambda: agent.history(1) and agent.history(1)[0].result is Outcome.APPLIED, what="v1 applied")
        load = RequestLoop(f"{url}/greet")
        repo.write("deployments/greet.toml", canary_toml(tag, f'"{tag}-v2" = 1.0'))
        canary = repo.commit("v2 takes over")
        entry = wait_for(
            lambda: (e := agent.history(1)[0]).commit == canary and e.result is Outcome.ABORTED and e, 60,
            what="the canary commit recorded as aborted",
        )
        seen_before = len(load.bodies)
        wait_for(lambda: len(load.bodies) >= seen_before + 30, 30, what="answers after the abort")
        load.stop()
        after = {body["label"] for body in load.bodies[seen_before + 10:]}
    finally:
        running.stop()
    assert f"{tag}-v2: error_ratio" in entry.errors[0] and "> 0.05" in entry.errors[0]
    status = agent.status()
    ready = status.condition("Ready")
    assert status.status is SyncStatus.DEGRADED and ready is not None and ready.reason == "RolloutAborted"
    assert after == {"v1"}


def test_auto_revert_after_an_aborted_canary_goes_back_to_the_last_good_commit_and_holds_the_canary(
    repo, tmp_path: Path, empty_cluster
) -> None:
    client, url, _ = empty_cluster
    tag = f"t{uuid.uuid4().hex[:6]}"
    write_greeter_app(repo)
    repo.write("deployments/greet.toml", canary_toml(tag, f'"{tag}-v1" = 1.0'))
    good = repo.commit("v1 serves")
    running = RunningAgent(reverting_agent(repo, tmp_path / "state", client, auto_revert=True))
    load = RequestLoop(f"{url}/greet")
    try:
        agent = running.agent
        wait_for(lambda: applied(agent, good), what="v1 applied")
        repo.write("deployments/greet.toml", canary_toml(tag, f'"{tag}-v2" = 1.0'))
        canary = repo.commit("v2 takes over")
        wait_for(lambda: [(e.commit, e.result) for e in agent.history(2)] == [
            (good, Outcome.APPLIED), (canary, Outcome.ABORTED)], 60, what="the abort, then the revert applied")
        after = labels_after(load)
        quarantine = agent.status().quarantine
        repo.write("deployments/greet.toml", canary_toml(tag, f'"{tag}-v2" = 1.0', canary_errors=0.0, rollout=False))
        fixed = repo.commit("v2 fixed")
        wait_for(lambda: applied(agent, fixed), what="the newer commit applied normally")
        later = labels_after(load)
    finally:
        load.stop()
        running.stop()
    assert after == {"v1"}
    assert quarantine is not None and quarantine["good"] == good and quarantine["held"] == [canary]
    assert quarantine["reason"] == "analysis"
    assert later == {"v2"} and agent.status().quarantine is None


def test_gitops_rollback_by_hand_returns_the_cluster_to_an_earlier_commit_and_holds_the_newer_one(
    repo, tmp_path: Path, empty_cluster
) -> None:
    client, url, _ = empty_cluster
    tag = f"t{uuid.uuid4().hex[:6]}"
    write_greeter_app(repo)
    repo.write("deployments/greet.toml", canary_toml(tag, f'"{tag}-v1" = 1.0', rollout=False))
    first = repo.commit("v1 serves")
    admin_port = free_port()
    running = RunningAgent(reverting_agent(repo, tmp_path / "state", client, auto_revert=False), admin_port=admin_port)
    load = RequestLoop(f"{url}/greet")
    try:
        agent = running.agent
        wait_for(lambda: applied(agent, first), what="v1 applied")
        repo.write("deployments/greet.toml", canary_toml(tag, f'"{tag}-v2" = 1.0', canary_errors=0.0, rollout=False))
        second = repo.commit("v2 takes over")
        wait_for(lambda: applied(agent, second), what="v2 applied")
        before = labels_after(load)
        done = subprocess.run(
            [sys.executable, "-m", "gitops", "rollback", first[:7], "--agent", f"http://127.0.0.1:{admin_port}"],
            capture_output=True, text=True, timeout=30,
        )
        wait_for(lambda: [(e.commit, e.result) for e in agent.history(1)] == [(first, Outcome.APPLIED)],
                 what="the first commit applied again")
        after = labels_after(load)
    finally:
        load.stop()
        running.stop()
    assert done.returncode == 0, done.stderr
    assert before == {"v2"} and after == {"v1"}
    quarantine = agent.status().quarantine
    assert quarantine is not None and quarantine["held"] == [second] and quarantine["reason"] == "manual"


def test_auto_revert_after_a_failed_apply_goes_back_to_the_last_good_commit_and_holds_the_head(
    repo, tmp_path: Path, empty_cluster
) -> None:
    client, url, _ = empty_cluster
    tag = f"t{uuid.uuid4().hex[:6]}"
    write_greeter_app(repo)
    repo.write("deployments/greet.toml", canary_toml(tag, f'"{tag}-v1" = 1.0', rollout=False))
    good = repo.commit("v1 serves")
    running = RunningAgent(reverting_agent(repo, tmp_path / "state", client, auto_revert=True))
    agent = running.agent
    try:
        wait_for(lambda: applied(agent, good), what="v1 applied")
        load = RequestLoop(f"{url}/greet")
        try:
            repo.write("deployments/apps/greeter.py", APP.replace(
                "self.label = label", "raise RuntimeError('model file missing')"))
            broken = repo.commit("v2 code that cannot start")
            # The failed apply undid itself; the rollback's re-apply of the good commit then has nothing to change.
            wait_for(lambda: [(e.commit, e.result) for e in agent.history(2)] == [
                (good, Outcome.NOOP), (broken, Outcome.FAILED)], 90, what="the failed apply, then the revert applied")
            assert agent.history(1)[0].plan_summary.startswith(f"rolled back to {good[:7]} (holding {broken[:7]})")
            assert agent.status().status.value == "Held"
            quarantine = agent.status().quarantine
            after = labels_after(load)
            repo.write("deployments/apps/greeter.py", APP)
            fixed = repo.commit("v2 code fixed")
            wait_for(lambda: applied(agent, fixed), what="the newer commit applied normally")
            later = labels_after(load)
        finally:
            codes = load.stop()
    finally:
        running.stop()
    assert quarantine is not None and quarantine["good"] == good and quarantine["held"] == [broken]
    assert quarantine["reason"] == "apply_failed"
    assert after == {"v1"} and later == {"v1"} and agent.status().quarantine is None
    assert set(codes) == {200}  # the old version served throughout
