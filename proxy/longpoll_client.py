"""The proxy's long poll on the controller: fetch changes, build and install snapshots.

Loops on `controller.listen_for_change(keys_to_snapshot_ids)`; each answer is
fed to `Subscriptions` and the resulting snapshot is installed in one step.
The call also acknowledges what we hold. When the controller is unreachable
(restarting, not yet started) the proxy keeps serving its last snapshot and
retries with capped exponential backoff; snapshot ids from a restarted
controller are taken as they come.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

import ray

from proxy.config import Snapshot
from proxy.settings import ProxySettings
from proxy.subscriptions import Subscriptions

__all__ = ["LongPollClient"]

logger = logging.getLogger(__name__)


class LongPollClient:
    def __init__(
        self,
        controller_name: str,
        namespace: str,
        subscriptions: Subscriptions,
        install: Callable[[Snapshot], None],
        settings: ProxySettings,
    ) -> None:
        self._name = controller_name
        self._namespace = namespace
        self._subscriptions = subscriptions
        self._install = install
        self._settings = settings
        self._controller: Any = None
        self.rounds = 0

    async def run(self) -> None:
        backoff = self._settings.longpoll_backoff_s
        failing = False
        while True:
            try:
                await self._poll_once()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 — the data plane must outlive any controller failure
                if not failing:
                    logger.warning("controller %s unreachable, serving the last config: %s", self._name, error)
                failing = True
                self._controller = None
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._settings.longpoll_max_backoff_s)
                continue
            if failing:
                logger.info("controller %s reachable again", self._name)
            failing = False
            backoff = self._settings.longpoll_backoff_s

    async def _poll_once(self) -> None:
        if self._controller is None:
            loop = asyncio.get_running_loop()
            # get_actor is a blocking GCS lookup: keep it off the event loop.
            self._controller = await loop.run_in_executor(None, self._lookup)
        keys = self._subscriptions.keys_to_snapshot_ids()
        updates = await self._controller.listen_for_change.remote(keys)
        self.rounds += 1
        if updates:
            self._install(self._subscriptions.apply(updates))

    def _lookup(self) -> Any:
        return ray.get_actor(self._name, namespace=self._namespace)
