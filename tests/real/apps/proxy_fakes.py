"""Test-only stand-ins for the proxy's real-tier tests: a long-poll controller.

`FakeController` implements just what a proxy calls: `listen_for_change` as
the controller's long poll does (answer changed keys at once, else block
until a change or a short timeout) and `report_load`; plus `publish` for
tests to push payloads.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["FakeController"]


class FakeController:
    def __init__(self, timeout_s: float = 2.0) -> None:
        self._values: dict[str, tuple[int, Any]] = {}
        self._next_id = 0
        self._changed = asyncio.Event()
        self._timeout_s = timeout_s
        self.acks: dict[str, dict[str, int]] = {}
        self.loads: dict[str, dict[str, tuple[int, int]]] = {}

    async def publish(self, updates: dict[str, Any]) -> None:
        for key, payload in updates.items():
            self._next_id += 1
            self._values[key] = (self._next_id, payload)
        self._changed.set()
        self._changed = asyncio.Event()

    async def listen_for_change(
        self, keys_to_snapshot_ids: dict[str, int], proxy_id: str = ""
    ) -> dict[str, tuple[int, Any]]:
        self.acks[proxy_id] = dict(keys_to_snapshot_ids)
        deadline = asyncio.get_running_loop().time() + self._timeout_s
        while True:
            changed = {
                key: value
                for key, value in self._values.items()
                if key in keys_to_snapshot_ids and keys_to_snapshot_ids[key] != value[0]
            }
            remaining = deadline - asyncio.get_running_loop().time()
            if changed or remaining <= 0:
                return changed
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                pass

    async def report_load(
        self, proxy_id: str, loads: dict[str, tuple[int, int]], requests: dict[str, Any] | None = None,
        endpoint_requests: dict[str, Any] | None = None, reported: dict[str, float] | None = None,
        stalled: dict[str, dict[str, str]] | None = None,
    ) -> None:
        self.loads[proxy_id] = dict(loads)

    async def reported_loads(self) -> dict[str, dict[str, tuple[int, int]]]:
        return self.loads

    async def acked(self) -> dict[str, dict[str, int]]:
        return self.acks
