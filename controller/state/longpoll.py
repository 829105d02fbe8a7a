"""The host side of long poll: per-key snapshots and who has acknowledged them.

Owns the snapshot id of every key, the latest payload, waking blocked
listeners, and the record of which snapshot ids each proxy last reported
(an acknowledgement). It pushes only keys whose snapshot differs from what
the listener holds, so a one-endpoint change costs one key, not the world.
An answer also carries the keys its payloads imply that the listener does
not hold yet (`LongPollKey.implied`: a route table's endpoints, their
replica sets), so a fresh or restarted proxy gets its whole table in one
round trip instead of one per level.

Snapshot ids start from the wall clock in microseconds at construction, so
an id held from an earlier controller incarnation never equals a current
one: a client holding a stale id after a restart simply gets fresh data.

No Ray here; payloads are opaque values to it beyond `LongPollKey.implied`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from vocabulary.control.goal_api import LongPollKey

__all__ = ["LongPollHost", "ANONYMOUS"]

ANONYMOUS = "<anonymous>"


@dataclass
class _Entry:
    snapshot_id: int
    payload: Any
    fingerprint: Any


class LongPollHost:
    def __init__(self, first_id: int | None = None) -> None:
        self._next_id = first_id if first_id is not None else time.time_ns() // 1000
        self._entries: dict[str, _Entry] = {}
        self._changed = asyncio.Event()
        self._acks: dict[str, dict[str, int]] = {}

    # --- publishing ---------------------------------------------------------

    def publish(self, key: str, payload: Any, fingerprint: Any) -> bool:
        """Set a key's payload; a new snapshot only when `fingerprint` changed."""
        entry = self._entries.get(key)
        if entry is not None and entry.fingerprint == fingerprint:
            return False
        self._next_id += 1
        self._entries[key] = _Entry(self._next_id, payload, fingerprint)
        self._wake()
        return True

    def snapshot_id(self, key: str) -> int | None:
        entry = self._entries.get(key)
        return None if entry is None else entry.snapshot_id

    def fingerprint(self, key: str) -> Any:
        entry = self._entries.get(key)
        return None if entry is None else entry.fingerprint

    def keys(self) -> list[str]:
        return list(self._entries)

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # --- listening ----------------------------------------------------------

    def updates_for(self, held: dict[str, int]) -> dict[str, tuple[int, Any]]:
        """Every requested key whose current snapshot differs from `held`, and
        every published key those updates imply that `held` lacks."""
        out: dict[str, tuple[int, Any]] = {}
        for key, snapshot_id in held.items():
            entry = self._entries.get(key)
            if entry is None:
                # Never published (e.g. a deleted endpoint before a restart):
                # tell the client it is gone, once, with id 0.
                if snapshot_id != 0:
                    out[key] = (0, None)
            elif entry.snapshot_id != snapshot_id:
                out[key] = (entry.snapshot_id, entry.payload)
        self._add_implied(out, held)
        return out

    def _add_implied(self, out: dict[str, tuple[int, Any]], held: dict[str, int]) -> None:
        pending = list(out.values())
        while pending:
            _, payload = pending.pop()
            for key in LongPollKey.implied(payload):
                entry = self._entries.get(key)
                if key in held or key in out or entry is None:
                    continue
                out[key] = (entry.snapshot_id, entry.payload)
                pending.append(out[key])

    async def listen(
        self, held: dict[str, int], proxy_id: str | None, timeout_s: float
    ) -> dict[str, tuple[int, Any]]:
        """Record `held` as acknowledged, then return changes (blocking up to timeout)."""
        if not held:
            # An empty subscription still learns the route table.
            held = {"routes": -1}
        self.record_ack(proxy_id or ANONYMOUS, held)
        deadline = time.monotonic() + timeout_s
        while True:
            updates = self.updates_for(held)
            if updates:
                return updates
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return {}
            try:
                await asyncio.wait_for(self._changed.wait(), timeout=remaining)
            except TimeoutError:
                return {}

    # --- acknowledgements ---------------------------------------------------

    def record_ack(self, proxy_id: str, held: dict[str, int]) -> None:
        # Each listen call names the proxy's whole subscription, so it replaces
        # the last one: a key the proxy dropped is no longer awaited for acks.
        self._acks[proxy_id] = dict(held)

    def forget(self, proxy_id: str) -> None:
        self._acks.pop(proxy_id, None)

    def acked(self, proxy_id: str, key: str) -> bool:
        """Has this proxy reported holding the current snapshot of `key`?"""
        acks = self._acks.get(proxy_id)
        if acks is None:
            # A proxy that never named itself: fall back to anonymous reports.
            acks = self._acks.get(ANONYMOUS, {})
        current = self.snapshot_id(key)
        if current is None:
            return True
        return acks.get(key) == current

    def subscribed(self, proxy_id: str, key: str) -> bool:
        acks = self._acks.get(proxy_id) or self._acks.get(ANONYMOUS, {})
        return key in acks
