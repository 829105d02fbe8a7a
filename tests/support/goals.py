"""The controller's goal API driven by hand: its options, polling a goal, stopping.

Moved out of tests/pure/test_goals_api.py, whose tests use them too."""

from __future__ import annotations

import asyncio

from controller.actor import ControllerActor
from vocabulary.control.status import ClusterStatus

OPTIONS = {"tick_s": 0.01, "proxy_class": None, "backoff_base_s": 0.01, "backoff_max_s": 0.02}

async def poll(ctl: ControllerActor, done, timeout_s: float = 5.0) -> ClusterStatus:
    """The controller's status once `done(status)` holds; fails after `timeout_s`."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        status = await ctl.get_status()
        if done(status):
            return status
        assert asyncio.get_running_loop().time() < deadline, f"status never matched: {status}"
        await asyncio.sleep(0.01)

async def stop(ctl: ControllerActor) -> None:
    ctl._stop_loop()
