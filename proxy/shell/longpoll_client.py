"""The proxy's long poll on the controller: fetch changes, build and install snapshots.

Loops on `controller.listen_for_change(keys_to_snapshot_ids, proxy_id=node_id)`;
each answer is fed to `Subscriptions` and the resulting snapshot is installed
in one step. The call also acknowledges what we hold, attributed to this
proxy by `proxy_id`. When the controller is unreachable
(restarting, not yet started) the proxy keeps serving its last snapshot and
retries with capped exponential backoff; snapshot ids from a restarted
controller are taken as they come.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from proxy.routes.snapshot import Snapshot
from proxy.shell.controller_link import ControllerLink
from proxy.settings import ProxySettings
from proxy.routes.subscriptions import Subscriptions
from vocabulary.control.actor_apis import ControllerAPI

__all__ = ["LongPollClient"]

logger = logging.getLogger(__name__)


class LongPollClient:
    def __init__(
        self,
        link: ControllerLink,
        proxy_id: str,
        subscriptions: Subscriptions,
        install: Callable[[Snapshot], None],
        settings: ProxySettings,
    ) -> None:
        self._link = link
        self._proxy_id = proxy_id
        self._subscriptions = subscriptions
        self._install = install
        self._settings = settings

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
                    logger.warning("controller %s unreachable, serving the last config: %s", self._link.name, error)
                failing = True
                self._link.forget()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._settings.longpoll_max_backoff_s)
                continue
            if failing:
                logger.info("controller %s reachable again", self._link.name)
            failing = False
            backoff = self._settings.longpoll_backoff_s

    async def _poll_once(self) -> None:
        controller = await self._link.get()
        keys = self._subscriptions.keys_to_snapshot_ids()
        updates = await controller.call(ControllerAPI.listen_for_change, keys, proxy_id=self._proxy_id)
        if updates:
            self._install(self._subscriptions.apply(updates))
