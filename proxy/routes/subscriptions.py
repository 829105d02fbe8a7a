"""What the proxy has heard from the controller, and what it asks for next.

Keeps the last payload and snapshot id of every long-poll key, derives the
keys to subscribe to (routes → each routed endpoint → each backend those
endpoints use, primary or shadow) and owns the replica pools, updating them
in place as `replicas:<backend>` payloads arrive. No Ray, no I/O: the long
poll client feeds it and installs the snapshots it builds.

An endpoint config is served only once the replica sets of all its traffic
backends have arrived; until then the previous config keeps serving. So a
traffic switch to a new backend never answers 503 for the moment between
the controller's endpoint push and its replica push.
"""

from __future__ import annotations

from typing import Any, Mapping

from vocabulary.control.actor_apis import Remote
from vocabulary.control.goal_api import LongPollKey
from vocabulary.control.longpoll import ReplicaSet, RouteTable
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.request_path.choosing import Random
from proxy.routes.snapshot import Snapshot, build_snapshot
from proxy.pool.replicas import ReplicaPool
from proxy.settings import ProxySettings

__all__ = ["Subscriptions", "UNSEEN"]

# The id we send for a key we hold no snapshot of: any real id differs.
UNSEEN = -1

_ENDPOINT_PREFIX = LongPollKey.endpoint("")
_REPLICAS_PREFIX = LongPollKey.replicas("")


class Subscriptions:
    def __init__(self, settings: ProxySettings, rng: Random) -> None:
        self._settings = settings
        self._rng = rng
        self._ids: dict[str, int] = {}
        self._table = RouteTable()
        self._endpoints: dict[str, EndpointConfig] = {}
        self._serving: dict[str, EndpointConfig] = {}
        self._pools: dict[str, ReplicaPool] = {}

    @property
    def pools(self) -> Mapping[str, ReplicaPool]:
        return self._pools

    def keys_to_snapshot_ids(self) -> dict[str, int]:
        wanted = {LongPollKey.ROUTES}
        wanted |= {LongPollKey.endpoint(e.endpoint) for e in self._table.entries}
        for backend in self._backends_in_use():
            wanted.add(LongPollKey.replicas(backend))
        return {key: self._ids.get(key, UNSEEN) for key in sorted(wanted)}

    def apply(self, updates: Mapping[str, tuple[int, Any]]) -> Snapshot:
        """Take in one long-poll answer; returns the snapshot to serve from now on."""
        for key, (snapshot_id, payload) in updates.items():
            self._ids[key] = snapshot_id
            self._take(key, payload)
        self._promote_complete()
        self._forget_unused()
        return build_snapshot(self._table, self._serving, self._pools)

    def _backends_in_use(self) -> set[str]:
        used: set[str] = set()
        for config in (*self._endpoints.values(), *self._serving.values()):
            used |= config.backends()
        return used

    def _promote_complete(self) -> None:
        for name, config in self._endpoints.items():
            if all(backend in self._pools for backend in config.traffic):
                self._serving[name] = config

    def _take(self, key: str, payload: Any) -> None:
        if key == LongPollKey.ROUTES:
            self._table = payload if payload is not None else RouteTable()
        elif key.startswith(_ENDPOINT_PREFIX):
            name = key[len(_ENDPOINT_PREFIX):]
            if payload is None:
                self._endpoints.pop(name, None)
                self._serving.pop(name, None)
            else:
                self._endpoints[name] = payload
        elif key.startswith(_REPLICAS_PREFIX):
            self._take_replicas(key[len(_REPLICAS_PREFIX):], payload)

    def _take_replicas(self, backend: str, replica_set: ReplicaSet | None) -> None:
        pool = self._pools.get(backend)
        if pool is None:
            pool = ReplicaPool(backend, self._rng, self._settings.max_queued_per_backend)
            self._pools[backend] = pool
        if replica_set is None:
            pool.update(pool.max_concurrent, ())
            return
        pool.update(
            replica_set.max_concurrent_queries,
            ((r.replica_id, Remote(r.handle)) for r in replica_set.replicas),
            replica_set.batching,
            replica_set.cold_start_timeout_s,
            replica_set.routing,
            replica_set.multiplex,
            replica_set.llm_adapters,
        )
        pool.commit = replica_set.commit

    def _forget_unused(self) -> None:
        routed = {entry.endpoint for entry in self._table.entries}
        for known in (self._endpoints, self._serving):
            for name in [n for n in known if n not in routed]:
                del known[name]
        used = self._backends_in_use()
        for backend in [b for b in self._pools if b not in used]:
            # Requests still holding this pool finish on their replicas.
            del self._pools[backend]
        wanted = set(self.keys_to_snapshot_ids())
        for key in [k for k in self._ids if k not in wanted]:
            del self._ids[key]
