"""Scenario 8: head-node control-plane durability with Ray GCS fault
tolerance on a real Redis (Debian's `redis-server`).

Kill the GCS server, start it again: the data plane serves throughout with
0 failed requests, no replica is re-created, and the controller carries on
from its state (a commit pushed afterwards is applied).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from tests.conftest import GitRepo
from tests.support.agents import LOAD_PATH, write_service
from tests.support.load import SteadyLoad
from tests.support.rayheads import RayHead, RedisServer
from tests.support.scenario import record_run, under_load
from tests.support.stack import AgentProcess


def _serving_pids(url: str) -> set[int]:
    """The replica processes answering (two replicas, least-loaded choice: 20 requests meet both)."""
    return {httpx.get(url, timeout=10).json()["pid"] for _ in range(20)}


@pytest.fixture
def head(tmp_path: Path) -> Iterator[RayHead]:
    """A Ray head whose GCS keeps its tables in a Redis of its own (GCS fault tolerance)."""
    redis = RedisServer()
    try:
        started = RayHead(tmp_path, {"RAY_REDIS_ADDRESS": redis.address,
                                     "RAY_external_storage_namespace": f"gitops-{uuid.uuid4().hex[:8]}"})
        yield started
        started.remove()
    finally:
        redis.stop()


def test_a_restarted_gcs_on_redis_loses_no_request_and_no_state(
    ray_session: str, head: RayHead, repo: GitRepo, tmp_path: Path, window_s: float
) -> None:
    first = write_service(repo, "one")
    agent = AgentProcess(repo.root, tmp_path, head.address)
    outcome: dict[str, object] = {}
    try:
        agent.wait_applied(first)

        def restart_the_gcs(_: SteadyLoad) -> float:
            before = _serving_pids(agent.proxy + LOAD_PATH)
            killed = time.monotonic()
            head.start_gcs(head.kill_gcs())
            outcome["replicas_kept"] = _serving_pids(agent.proxy + LOAD_PATH) == before
            later = write_service(repo, "two")
            agent.wait_applied(later)
            return time.monotonic() - killed

        report, recovery_s = under_load(agent.proxy + LOAD_PATH, window_s, restart_the_gcs)
    finally:
        agent.stop()
    record_run("8", "GCS killed and restarted (GCS fault tolerance on Redis)", report, recovery_s, 0,
               "recovery = GCS kill to the next commit applied")
    assert report.failed == 0, report.summary()
    assert outcome["replicas_kept"] is True
