"""End to end: a canary commit in a real git repository is rolled out, judged and aborted.

The real agent, controller and proxy (the session's Ray, loopback HTTP):
a commit moving an endpoint's traffic to a backend that fails 20% of its
requests is stopped at its first step by the proxy's own counts; history
records the commit as aborted with the check and its measured value, the
status says Degraded / RolloutAborted, and traffic is back on the old version.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from gitops.ledger import Outcome
from gitops.status import SyncStatus
from tests.real.test_agent_e2e import (  # noqa: F401 (cluster, empty_cluster: fixtures)
    RequestLoop,
    RunningAgent,
    cluster,
    empty_cluster,
    make_agent,
    wait_for,
)

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


def canary_toml(tag: str, traffic: str) -> str:
    backends = "".join(
        f'[backends.{tag}-{label}]\nimport_path = "deployments.apps.greeter:Greeter"\ninit_args = ["{label}"]\n'
        f"user_config = {{ error_share = {share} }}\nray_actor_options = {{ num_cpus = 0.01 }}\n"
        "graceful_shutdown_timeout_s = 1\n\n"
        for label, share in (("v1", 0.0), ("v2", 0.2))
    )
    return backends + (
        f'[endpoints.greet]\nroute = "/greet"\ntraffic = {{ {traffic} }}\n\n'
        "[endpoints.greet.rollout]\nsteps = [0.5, 1.0]\nstep_interval_s = 10\nmin_requests = 10\nmax_error_ratio = 0.05\n"
    )


def test_a_canary_commit_failing_a_fifth_of_its_requests_is_aborted_and_recorded(
    repo, tmp_path: Path, empty_cluster
) -> None:
    client, url, _ = empty_cluster
    tag = f"t{uuid.uuid4().hex[:6]}"
    repo.write("deployments/__init__.py", "")
    repo.write("deployments/apps/__init__.py", "")
    repo.write("deployments/apps/greeter.py", APP)
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
