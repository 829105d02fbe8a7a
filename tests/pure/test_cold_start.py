"""Scale to zero: requests wait for a first replica, within `cold_start_timeout_s`."""

from __future__ import annotations

import asyncio
import random

import pytest

from proxy.pool.replicas import NoReplicaError, ReplicaPool
from vocabulary.spec.backends import AutoscalingConfig, BackendConfig
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.serving_rules import state_problems


def cold_pool(cold_start_s: float, max_queued: int = 10) -> ReplicaPool:
    pool = ReplicaPool("b", random.Random(0), max_queued)
    pool.update(1, [], cold_start_s=cold_start_s)
    return pool


def test_a_request_at_zero_replicas_waits_for_the_first_replica_and_gets_it() -> None:
    async def scenario() -> tuple[int, str]:
        pool = cold_pool(5)
        waiting = asyncio.ensure_future(pool.acquire())
        await asyncio.sleep(0.01)
        queued = pool.queued()
        pool.update(1, [("r0", "handle-0")], cold_start_s=5)
        return queued, (await waiting).replica_id

    assert asyncio.run(scenario()) == (1, "r0")


def test_a_request_still_without_a_replica_after_the_cold_start_time_is_refused() -> None:
    async def scenario() -> float:
        pool = cold_pool(0.05)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(NoReplicaError):
            await pool.acquire()
        assert pool.queued() == 0 and pool.unserved() == 1
        return loop.time() - started

    assert asyncio.run(scenario()) >= 0.05


def test_waiting_requests_survive_a_republished_empty_replica_set() -> None:
    async def scenario() -> str:
        pool = cold_pool(5)
        waiting = asyncio.ensure_future(pool.acquire())
        await asyncio.sleep(0)
        pool.update(1, [], cold_start_s=5)
        await asyncio.sleep(0.01)
        pool.update(1, [("r0", "handle-0")], cold_start_s=5)
        return (await waiting).replica_id

    assert asyncio.run(scenario()) == "r0"


def scaled_from_zero(**fields: object) -> BackendConfig:
    scaling = AutoscalingConfig(min_replicas=0, max_replicas=2)
    return BackendConfig(name="b", version="1", import_path="m:M", autoscaling=scaling, **fields)


def rules(backend: BackendConfig) -> list[str]:
    endpoint = EndpointConfig(name="api", route="/api", traffic={"b": 1.0})
    return [problem.message for problem in state_problems({"b": backend}, {"api": endpoint})]


def test_traffic_to_a_backend_scaling_from_zero_is_allowed_with_a_cold_start_timeout() -> None:
    assert rules(scaled_from_zero(cold_start_timeout_s=30)) == []


def test_traffic_to_a_backend_scaling_from_zero_without_a_cold_start_timeout_is_still_refused() -> None:
    assert rules(scaled_from_zero()) == [
        "endpoints.api.traffic: backend 'b' gets 100% of the traffic but can have 0 replicas "
        "(autoscaling.min_replicas = 0); set cold_start_timeout_s to hold its requests while a first replica starts"
    ]


def test_a_cold_start_timeout_does_not_allow_traffic_to_a_fixed_zero_replicas() -> None:
    fixed = BackendConfig(name="b", version="1", import_path="m:M", num_replicas=0, cold_start_timeout_s=30)
    assert rules(fixed) == [
        "endpoints.api.traffic: backend 'b' gets 100% of the traffic but can have 0 replicas (num_replicas = 0)"
    ]
