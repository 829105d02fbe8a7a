"""The controller's goal API in-process, with a fake adapter and in-memory storage.

No Ray: `ControllerActor` runs as a plain object on an asyncio loop, so these
tests check its ordering guarantees (checkpoint before acting), idempotence
and recovery from a checkpoint deterministically.
"""

from __future__ import annotations

import asyncio

import pytest

from controller.actor import ControllerActor
from controller.persistence.checkpoint import decode
from controller.state.backend_state import Probe, ProbeStatus, replica_actor_name
from controller.state.proxy_fleet import ProxySpec, StartProxy
from controller.testing import FakeAdapter, MemoryStorage
from tests.support.goals import OPTIONS, poll, stop
from vocabulary.control.goals import GoalState
from vocabulary.control.status import ProxyState, ProxyStatus
from vocabulary.spec.backends import BackendConfig
from vocabulary.spec.endpoints import EndpointConfig


def checkpointed(data: bytes | None) -> set[str]:
    """The replica actors a stored checkpoint knows."""
    saved = decode(data)
    return {replica_actor_name(r["replica_id"])
            for b in saved["backends"]["backends"].values() for r in b["replicas"]}


def backend(version: str = "v1", replicas: int = 2) -> BackendConfig:
    return BackendConfig(name="echo", version=version, import_path="m:f", num_replicas=replicas)


def controller(storage: MemoryStorage, adapter: FakeAdapter) -> ControllerActor:
    return ControllerActor("ns", OPTIONS, storage=storage, adapter=adapter)


def test_every_replica_is_in_the_checkpoint_before_it_is_started():
    async def scenario():
        storage = MemoryStorage()
        adapter = FakeAdapter(storage=storage)
        ctl = controller(storage, adapter)
        result = await ctl.wait_for_goal(await ctl.apply_backend(backend()), 5)
        await stop(ctl)
        return result, adapter

    result, adapter = asyncio.run(scenario())
    assert result.state == GoalState.MET
    assert len(adapter.started) == 2
    assert all(name in checkpointed(data)
               for name, data in zip(adapter.started, adapter.checkpoints_at_start))


def test_identical_apply_returns_a_met_goal_and_writes_nothing():
    async def scenario():
        storage = MemoryStorage()
        ctl = controller(storage, FakeAdapter())
        first = await ctl.apply_backend(backend())
        await ctl.wait_for_goal(first, 5)
        writes = storage.writes
        again = await ctl.apply_backend(backend())
        result = await ctl.wait_for_goal(again, 0)
        await stop(ctl)
        return first, again, result, writes, storage.writes

    first, again, result, before, after = asyncio.run(scenario())
    assert again == first and result.state == GoalState.MET and after == before


def test_restarted_controller_recovers_state_and_adopts_live_replicas():
    async def scenario():
        storage = MemoryStorage()
        adapter = FakeAdapter()
        ctl = controller(storage, adapter)
        await ctl.wait_for_goal(await ctl.apply_backend(backend()), 5)
        await ctl.apply_endpoint(EndpointConfig(name="e", route="/e", traffic={"echo": 1.0}))
        await stop(ctl)
        started = list(adapter.started)
        again = controller(storage, adapter)
        await asyncio.sleep(0.1)
        state = await again.get_state()
        status = await again.get_status()
        await stop(again)
        return started, adapter.started, state, status

    before, after, state, status = asyncio.run(scenario())
    assert after == before  # nothing started again
    assert set(state.backends) == {"echo"} and set(state.endpoints) == {"e"}
    assert [r.state.value for r in status.backends["echo"].replicas] == ["RUNNING", "RUNNING"]


def test_each_start_over_a_checkpoint_counts_as_a_controller_restart():
    async def scenario():
        storage, adapter = MemoryStorage(), FakeAdapter()
        counts = []
        for _ in range(3):
            ctl = controller(storage, adapter)
            await ctl.wait_for_goal(await ctl.apply_backend(backend()), 5)
            counts.append((await ctl.get_status()).controller_restarts)
            await stop(ctl)
        return counts

    assert asyncio.run(scenario()) == [0, 1, 2]


def test_replica_unknown_to_the_checkpoint_is_killed_on_recovery():
    async def scenario():
        storage = MemoryStorage()
        adapter = FakeAdapter()
        ctl = controller(storage, adapter)
        await ctl.wait_for_goal(await ctl.apply_backend(backend(replicas=1)), 5)
        await stop(ctl)
        adapter.alive.add("gitops-replica-echo-v1-99")
        again = controller(storage, adapter)
        await stop(again)
        return adapter.alive

    assert asyncio.run(scenario()) == {"gitops-replica-echo-v1-0"}


def test_failing_version_fails_its_goal_with_the_replica_error():
    async def scenario():
        storage = MemoryStorage()
        ctl = controller(storage, FakeAdapter(start_error="ImportError: no module named x"))
        result = await ctl.wait_for_goal(await ctl.apply_backend(backend()), 5)
        await stop(ctl)
        return result

    result = asyncio.run(scenario())
    assert result.state == GoalState.FAILED and result.reason == "ImportError: no module named x"


def test_invalid_endpoint_raises_and_leaves_the_checkpoint_untouched():
    async def scenario():
        storage = MemoryStorage()
        ctl = controller(storage, FakeAdapter())
        await ctl.apply_backend(backend())
        writes = storage.writes
        with pytest.raises(ValueError, match="sum to 0.5"):
            await ctl.apply_endpoint(EndpointConfig(name="e", route="/e", traffic={"echo": 0.5}))
        with pytest.raises(ValueError, match="unknown goal"):
            await ctl.wait_for_goal("nope", 0)
        await stop(ctl)
        return writes, storage.writes, await ctl.get_state()

    before, after, state = asyncio.run(scenario())
    assert after == before and state.endpoints == {}


def test_status_reports_each_nodes_proxy_from_starting_to_running():
    async def scenario():
        adapter = FakeAdapter()
        options = {**OPTIONS, "proxy_class": "proxy.actor:ProxyActor", "proxy_check_s": 0.01}
        ctl = ControllerActor("ns", options, storage=MemoryStorage(), adapter=adapter)
        starting = (await ctl.get_status()).proxies
        adapter.proxy_calls["node-1"] = Probe(ProbeStatus.OK)
        running = await poll(ctl, lambda status: status.proxies["node-1"].state is ProxyState.RUNNING)
        await stop(ctl)
        return starting, running, adapter.applied

    starting, running, applied = asyncio.run(scenario())
    assert starting == {"node-1": ProxyStatus(actor_name="gitops-proxy-node-1", state=ProxyState.STARTING,
                                              failures=0, last_error="", address="127.0.0.1:8000")}
    assert running.proxies["node-1"].state is ProxyState.RUNNING
    assert StartProxy("node-1", ProxySpec("proxy.actor:ProxyActor", "gitops-controller",
                                          "127.0.0.1", 8000), node_ip="127.0.0.1") in applied
