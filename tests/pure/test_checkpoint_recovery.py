"""A controller recovers from a checkpoint an earlier layout of its code wrote.

`checkpoint_before_rooms.json` was written by the controller as it was before
its modules moved into rooms (`controller.state`, `controller.policies`,
`controller.shell`, `controller.persistence`): two backends with a running
replica each, an endpoint half-way through a rollout, an owner and a
Prometheus URL. The checkpoint is JSON of values only, so no module or class
path in it ties recovery to where code lives; this test keeps it so.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from controller.actor import ControllerActor
from controller.testing import FakeAdapter, MemoryStorage
from tests.support.goals import OPTIONS, poll, stop

WRITTEN_BEFORE = Path(__file__).with_name("checkpoint_before_rooms.json")
REPLICAS = {"gitops-replica-v1-1-0", "gitops-replica-v2-1-1"}


def test_the_checkpoint_names_no_module_or_class_of_ours() -> None:
    text = WRITTEN_BEFORE.read_text()
    assert not re.findall(r"\b(?:controller|proxy|replica|gitops|vocabulary)\.[a-z_]+", text)
    assert '"v1"' in text and '"api"' in text  # the scan above read a real checkpoint


def test_a_controller_recovers_from_a_checkpoint_written_before_its_modules_moved() -> None:
    async def scenario() -> None:
        storage = MemoryStorage()
        storage.put(WRITTEN_BEFORE.read_bytes())
        adapter = FakeAdapter(alive=set(REPLICAS))
        ctl = ControllerActor("ns", OPTIONS, storage=storage, adapter=adapter)
        status = await poll(ctl, lambda s: all(b.ready() == 1 for b in s.backends.values()))
        state = await ctl.get_state()
        owner = await ctl.owner()
        await stop(ctl)
        assert set(state.backends) == {"v1", "v2"} and set(state.endpoints) == {"api"}
        assert status.controller_restarts == 1
        assert owner is not None and owner["agent_id"] == "agent-1"
        assert status.rollouts["api"].target == {"v1": 0.5, "v2": 0.5} and status.rollouts["api"].step == 0
        assert ctl._loop.held.prometheus_url == "http://prom:9090"
        assert adapter.started == [] and adapter.killed == []  # both replicas adopted, none replaced

    asyncio.run(scenario())
