"""Autoscaling end to end (issue #7): `gitops run` on a real repo, real Ray, loopback HTTP.

One scenario, in the order a user would see it: a backend with min 1 / max 4
under a load step from a loopback client scales up within the upscale delay
plus replica start time, keeps its count across a commit that changes only
traffic and across drift checks, is clamped in place by a commit lowering
max_replicas, scales back down when the load stops, and no request fails at
any point (scale-down drains like any stop). A second one: a shadow-only
backend autoscaled down to zero comes up once copies of traffic arrive.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.conftest import GitRepo
from tests.real.apps.autoscale_stack import APP_SOURCE, AgentProcess, Load, controller_status
from vocabulary.control.longpoll import ReplicaState
from vocabulary.control.status import BackendStatus

pytestmark = pytest.mark.real

UPSCALE_DELAY_S = 1.0
DOWNSCALE_DELAY_S = 3.0
# A replica is a fresh Ray actor process (~0.5-0.75 s on an idle
# machine); this machine is shared with other test runs, hence the slack.
REPLICA_START_ALLOWANCE_S = 30.0
HIGH_LOAD_WORKERS = 12  # ~11 ongoing at 50 ms per request: wants 6, capped at 4
TARGET_ONGOING = 2


def spec(slow_weight: float, max_replicas: int = 4) -> str:
    return f"""
[backends.slow]
import_path = "apps.slow:slow"
graceful_shutdown_timeout_s = 5
ray_actor_options = {{ num_cpus = 0 }}

[backends.slow.autoscaling]
min_replicas = 1
max_replicas = {max_replicas}
target_ongoing_requests = {TARGET_ONGOING}
upscale_delay_s = {UPSCALE_DELAY_S}
downscale_delay_s = {DOWNSCALE_DELAY_S}

[backends.steady]
import_path = "apps.slow:slow"
num_replicas = 1
ray_actor_options = {{ num_cpus = 0 }}

[endpoints.slow]
route = "/slow"
traffic = {{ slow = {slow_weight}, steady = {round(1 - slow_weight, 6)} }}
"""


@pytest.fixture
def stack(ray_session: str, repo: GitRepo, tmp_path: Path) -> Iterator[tuple[AgentProcess, GitRepo, str]]:
    import ray

    repo.write("apps/__init__.py", "")
    repo.write("apps/slow.py", APP_SOURCE)
    repo.write("deployments/slow.toml", spec(0.9))
    first = repo.commit("slow: autoscaled 1..4, 90% of /slow")
    agent = AgentProcess(repo.root, tmp_path, ray.get_runtime_context().gcs_address)
    try:
        yield agent, repo, first
    finally:
        agent.stop()


def backend(name: str) -> BackendStatus:
    return controller_status().backends[name]


def running(name: str) -> set[str]:
    return {r.replica_id for r in backend(name).replicas if r.state is ReplicaState.RUNNING}


def exported_target(agent: AgentProcess, name: str) -> float | None:
    found = re.search(rf'^gitops_backend_target_replicas{{backend="{name}"}} (\S+)$', agent.metrics(), re.M)
    return float(found.group(1)) if found else None


def test_a_load_step_scales_up_and_back_down_without_failed_requests(stack, artifacts_dir):
    agent, repo, first = stack
    agent.wait_applied(first)
    assert backend("slow").target_replicas == 1

    load = Load(agent.proxy + "/slow")
    try:
        load.set_workers(HIGH_LOAD_WORKERS)
        step_at = time.monotonic()
        agent.wait("target 4", lambda: backend("slow").target_replicas == 4,
                   timeout_s=UPSCALE_DELAY_S + 10)
        agent.wait("4 running replicas", lambda: len(running("slow")) == 4,
                   timeout_s=UPSCALE_DELAY_S + REPLICA_START_ALLOWANCE_S)
        scaled_up_s = time.monotonic() - step_at
        assert scaled_up_s <= UPSCALE_DELAY_S + REPLICA_START_ALLOWANCE_S
        agent.wait("the exported target follows the autoscaler",
                   lambda: exported_target(agent, "slow") == 4.0, timeout_s=15)

        # A commit that changes only traffic, then a drift check or two: the
        # autoscaled count is the controller's and nobody resets it.
        replicas_before = running("slow")
        repo.write("deployments/slow.toml", spec(0.8))
        second = repo.commit("slow: 80%, traffic only")
        agent.wait_applied(second)
        time.sleep(2.5)  # longer than --resync-interval 2
        assert backend("slow").target_replicas == 4
        assert running("slow") == replicas_before

        # Narrower bounds are an in-place update: the count is clamped, and
        # the replicas that stay are the same ones (no restart).
        repo.write("deployments/slow.toml", spec(0.8, max_replicas=3))
        third = repo.commit("slow: at most 3 replicas")
        agent.wait_applied(third)
        agent.wait("3 running replicas", lambda: len(running("slow")) == 3, timeout_s=30)
        assert backend("slow").target_replicas == 3
        assert running("slow") < replicas_before

        # The load stops; one light client keeps probing while replicas drain.
        load.set_workers(1)
        stopped_at = time.monotonic()
        agent.wait("scaled back to 1", lambda: backend("slow").target_replicas == 1,
                   timeout_s=DOWNSCALE_DELAY_S + 15)
        agent.wait("3 replicas drained", lambda: len(running("slow")) == 1, timeout_s=30)
        scaled_down_s = time.monotonic() - stopped_at
        time.sleep(0.5)
    finally:
        load.stop()

    answers = load.answers()
    failed = [a for a in answers if a.status != 200]
    assert len(answers) > 200
    assert failed == [], f"{len(failed)} of {len(answers)} requests failed: {failed[:5]}"
    decisions = backend("slow").scaling_decisions
    assert decisions["up"] >= 1 and decisions["down"] >= 1
    (artifacts_dir / "autoscaling.json").write_text(json.dumps({
        "scaled_up_s": round(scaled_up_s, 2), "scaled_down_s": round(scaled_down_s, 2),
        "requests": len(answers), "failed": len(failed), "decisions": decisions,
    }))


SHADOW_FROM_ZERO = f"""
[backends.steady]
import_path = "apps.slow:slow"
num_replicas = 1
ray_actor_options = {{ num_cpus = 0 }}

[backends.candidate]
import_path = "apps.slow:slow"
ray_actor_options = {{ num_cpus = 0 }}

[backends.candidate.autoscaling]
min_replicas = 0
max_replicas = 2
target_ongoing_requests = {TARGET_ONGOING}
upscale_delay_s = {UPSCALE_DELAY_S}
downscale_delay_s = 60

[endpoints.slow]
route = "/slow"
traffic = {{ steady = 1.0 }}
shadow = {{ candidate = 1.0 }}
"""


def test_a_shadow_backend_scaled_to_zero_comes_up_when_copies_arrive(ray_session, repo, tmp_path):
    import ray

    repo.write("apps/__init__.py", "")
    repo.write("apps/slow.py", APP_SOURCE)
    repo.write("deployments/slow.toml", SHADOW_FROM_ZERO)
    first = repo.commit("candidate: shadow-only, autoscaled from 0")
    agent = AgentProcess(repo.root, tmp_path, ray.get_runtime_context().gcs_address)
    load = None
    try:
        agent.wait_applied(first)
        assert backend("candidate").target_replicas == 0
        load = Load(agent.proxy + "/slow")
        load.set_workers(4)
        agent.wait("a candidate replica running", lambda: len(running("candidate")) >= 1,
                   timeout_s=UPSCALE_DELAY_S + REPLICA_START_ALLOWANCE_S)
    finally:
        if load is not None:
            load.stop()
        agent.stop()
    assert [a for a in load.answers() if a.status != 200] == []
