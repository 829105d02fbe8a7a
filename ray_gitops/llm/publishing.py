"""An OpenAI backend's token counts, published to its node's file within a second of changing.

`TokenPublisher` takes the counts a replica measured (`TokenStats.counts`,
`ray_gitops.llm.token_stats`) and hands what changed since it last did to a
sink: the replica host's, which adds them to the node's `token_stats.json`
(`replica.token_stats_file`, read by the node's proxies at a scrape:
`proxy.observability.token_metrics`). `changed()` after a request ends;
the counts go at most once per `delay_s` (one file write a second however
many requests a replica serves), the last request's within `delay_s` of its
end. The sink runs in a thread (it takes a file lock). A sink that fails is
logged and its counts go with the next publication: they are marked
published only once the sink took them. `publish()` at once when the replica
drains (`ray_gitops.llm.app`); a replica killed loses what it had not yet
published (at most `delay_s` of requests).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from vocabulary.replicas.token_counts import ModelTokens

__all__ = ["TokenPublisher", "PUBLISH_DELAY_S"]

_LOG = logging.getLogger(__name__)
PUBLISH_DELAY_S = 1.0


class TokenPublisher:
    """Publishes `counts()` (cumulative, per model) to `sink` as differences, soon after each change."""

    def __init__(
        self,
        counts: Callable[[], dict[str, ModelTokens]],
        sink: Callable[[dict[str, ModelTokens]], None],
        delay_s: float = PUBLISH_DELAY_S,
    ) -> None:
        self._counts, self._sink, self._delay_s = counts, sink, delay_s
        self._published: dict[str, ModelTokens] = {}
        self._dirty = False
        self._task: asyncio.Task[None] | None = None

    def changed(self) -> None:
        """The counts changed: publish them within `delay_s` (on the running loop)."""
        self._dirty = True
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._publish_while_changing())

    async def _publish_while_changing(self) -> None:
        try:
            while self._dirty:
                await asyncio.sleep(self._delay_s)
                self._dirty = False
                await self.publish()
        finally:
            self._task = None

    async def publish(self) -> None:
        """Hand the sink what changed since the last publication (nothing when nothing did)."""
        now = self._counts()
        changes = {model: counts.minus(self._published.get(model, ModelTokens())) for model, counts in now.items()}
        changes = {model: counts for model, counts in changes.items() if not counts.empty()}
        if not changes:
            return
        try:
            await asyncio.to_thread(self._sink, changes)
        except Exception as error:  # noqa: BLE001 — a full disk must not fail requests: counted next time
            _LOG.warning("token metrics not published to the node's file (tried again with the next): %s", error)
            return
        self._published = now
