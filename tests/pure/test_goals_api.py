"""The controller's goal API in-process, with a fake adapter and in-memory storage.

No Ray: `ControllerActor` runs as a plain object on an asyncio loop, so these
tests check its ordering guarantees (checkpoint before acting), idempotence
and recovery from a checkpoint deterministically.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from controller.actor import ControllerActor
from controller.backend_state import Probe, ProbeStatus, StartReplica, StopReplica
from controller.checkpoint import MemoryStorage, decode
from vocabulary.configs import BackendConfig, EndpointConfig, GoalState

OPTIONS = {"tick_s": 0.01, "proxy_class": None, "backoff_base_s": 0.01, "backoff_max_s": 0.02}


class FakeAdapter:
    """Replicas start instantly (or fail with `error`); records what it was asked."""

    def __init__(self, storage: MemoryStorage, error: str = "") -> None:
        self.storage = storage
        self.error = error
        self.alive: set[str] = set()
        self.started: list[str] = []
        self.checkpointed_at_start: list[bool] = []

    def apply(self, effects: list[Any]) -> None:
        for effect in effects:
            if isinstance(effect, StartReplica):
                saved = decode(self.storage.get())
                names = {r["replica_id"] for b in saved["backends"]["backends"].values() for r in b["replicas"]}
                self.checkpointed_at_start.append(effect.replica_id in names)
                self.started.append(effect.actor_name)
                if not self.error:
                    self.alive.add(effect.actor_name)
            elif isinstance(effect, StopReplica):
                self.alive.discard(effect.actor_name)

    def start_probe(self, actor_name: str) -> Probe:
        if self.error:
            return Probe(ProbeStatus.FAILED, self.error)
        return Probe(ProbeStatus.OK if actor_name in self.alive else ProbeStatus.PENDING)

    def health_probe(self, actor_name: str) -> Probe | None:
        return None

    def drained(self, actor_name: str) -> bool:
        return True

    def node_of(self, actor_name: str) -> str:
        return "node"

    def node_alive(self, node_id: str) -> bool:
        return True

    def cannot_fit(self, options: dict, count: int) -> str:
        return ""

    def adopt(self, names: set[str]) -> set[str]:
        return names & self.alive

    def sweep_leaks(self, known: set[str]) -> list[str]:
        leaked = sorted(self.alive - known)
        self.alive -= set(leaked)
        return leaked

    def refresh_nodes(self) -> list[str]:
        return ["node"]

    def live_proxies(self) -> list[str]:
        return []

    def serving_proxies(self) -> list[str]:
        return []

    def proxy_status(self) -> dict:
        return {}

    def handle(self, actor_name: str) -> Any:
        return None


def backend(version: str = "v1", replicas: int = 2) -> BackendConfig:
    return BackendConfig(name="echo", version=version, import_path="m:f", num_replicas=replicas)


def controller(storage: MemoryStorage, adapter: FakeAdapter) -> ControllerActor:
    return ControllerActor("ns", OPTIONS, storage=storage, adapter=adapter)


async def stop(ctl: ControllerActor) -> None:
    ctl._stopping = True
    ctl._loop_task.cancel()


def test_every_replica_is_in_the_checkpoint_before_it_is_started():
    async def scenario():
        storage = MemoryStorage()
        adapter = FakeAdapter(storage)
        ctl = controller(storage, adapter)
        result = await ctl.wait_for_goal(await ctl.apply_backend(backend()), 5)
        await stop(ctl)
        return result, adapter

    result, adapter = asyncio.run(scenario())
    assert result.state == GoalState.MET
    assert len(adapter.started) == 2 and all(adapter.checkpointed_at_start)


def test_identical_apply_returns_a_met_goal_and_writes_nothing():
    async def scenario():
        storage = MemoryStorage()
        ctl = controller(storage, FakeAdapter(storage))
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
        adapter = FakeAdapter(storage)
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
    assert [r["state"] for r in status["backends"]["echo"]["replicas"]] == ["RUNNING", "RUNNING"]


def test_replica_unknown_to_the_checkpoint_is_killed_on_recovery():
    async def scenario():
        storage = MemoryStorage()
        adapter = FakeAdapter(storage)
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
        ctl = controller(storage, FakeAdapter(storage, error="ImportError: no module named x"))
        result = await ctl.wait_for_goal(await ctl.apply_backend(backend()), 5)
        await stop(ctl)
        return result

    result = asyncio.run(scenario())
    assert result.state == GoalState.FAILED and result.reason == "ImportError: no module named x"


def test_invalid_endpoint_raises_and_leaves_the_checkpoint_untouched():
    async def scenario():
        storage = MemoryStorage()
        ctl = controller(storage, FakeAdapter(storage))
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
