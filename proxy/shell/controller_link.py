"""The proxy's handle on the controller actor, found by name and re-found after failures.

Shared by the long poll and the load reporter so both follow a restarted
controller the same way. The name lookup is a blocking GCS call, so it runs
in a worker thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import ray

from vocabulary.control.actor_apis import ControllerAPI, Remote

__all__ = ["ControllerLink"]


class ControllerLink:
    def __init__(self, name: str, namespace: str) -> None:
        self.name = name
        self._namespace = namespace
        self._handle: Remote[ControllerAPI] | None = None

    async def get(self) -> Remote[ControllerAPI]:
        """The controller's actor handle; raises ValueError while it does not exist."""
        if self._handle is None:
            loop = asyncio.get_running_loop()
            self._handle = await loop.run_in_executor(None, self._lookup)
        return self._handle

    def forget(self) -> None:
        """After a failed call: look the controller up again next time."""
        self._handle = None

    def _lookup(self) -> Remote[ControllerAPI]:
        return Remote(ray.get_actor(self.name, namespace=self._namespace))
