"""What the proxies are told: the long-poll keys published from the state machines.

Owns turning the machines' state into long-poll payloads (`ReplicaSet` per
backend, each endpoint's config as served during its rollout, the route
table at each node's share of every limit) and publishing only what changed:
each key's fingerprint skips an unchanged payload, and a key whose backend or
endpoint is gone is published once as None. Pure: the replicas' Ray handles
come through the `handle_of` it is given; the snapshots are `longpoll`'s.
"""

from __future__ import annotations

from typing import Callable

from controller.state.backend_state import BackendState
from controller.state.endpoint_state import EndpointState
from controller.state.longpoll import LongPollHost
from controller.state.rollout_state import RolloutState
from vocabulary.control.longpoll import ReplicaInfo, ReplicaSet
from vocabulary.control.goal_api import LongPollKey

__all__ = ["Publisher"]


class Publisher:
    """Publishes replica sets, endpoints and routes to a `LongPollHost`."""

    def __init__(self, longpoll: LongPollHost, handle_of: Callable[[str], object]) -> None:
        self._longpoll = longpoll
        self._handle_of = handle_of  # a replica's Ray handle, by actor name
        self._endpoints: set[str] = set()
        self._backends: set[str] = set()
        self.proxy_nodes = 1  # alive nodes running proxies: each enforces 1/this of every [limits]

    def replicas(self, backends: BackendState) -> None:
        names = set(backends.names())
        for name in names:
            running = backends.running(name)
            config = backends.config(name)
            mcq = config.max_concurrent_queries if config else 1
            batching = config.batching if config else None
            cold_start_s = config.cold_start_timeout_s if config else None
            commit = config.commit if config else None
            routing = config.routing if config else None
            multiplex = config.multiplex if config else None
            adapters = tuple(config.llm.lora_adapters) if config and config.llm else ()
            key = (mcq, batching, cold_start_s, commit, routing, multiplex, adapters,
                   tuple(r.replica_id for r in running))
            if self._longpoll.fingerprint(LongPollKey.replicas(name)) == key:
                continue
            infos = tuple(
                ReplicaInfo(replica_id=r.replica_id, actor_name=r.actor_name, handle=self._handle_of(r.actor_name))
                for r in running
            )
            payload = ReplicaSet(
                backend=name, max_concurrent_queries=mcq, replicas=infos,
                batching=batching, cold_start_timeout_s=cold_start_s, commit=commit, routing=routing,
                multiplex=multiplex, llm_adapters=adapters,
            )
            self._longpoll.publish(LongPollKey.replicas(name), payload, key)
        for name in self._backends - names:
            self._longpoll.publish(LongPollKey.replicas(name), None, None)
        self._backends = names

    def endpoints(self, endpoints: EndpointState, rollouts: RolloutState) -> None:
        """Routes and every endpoint key; unchanged ones cost nothing."""
        self.routes(endpoints)
        current = endpoints.all()
        for name, config in current.items():
            served = rollouts.served(config)
            self._longpoll.publish(LongPollKey.endpoint(name), served, served)
        for name in self._endpoints - set(current):
            self._longpoll.publish(LongPollKey.endpoint(name), None, None)
        self._endpoints = set(current)

    def routes(self, endpoints: EndpointState) -> None:
        table = endpoints.route_table(self.proxy_nodes)
        self._longpoll.publish(LongPollKey.ROUTES, table, table)

    def endpoint(self, name: str, endpoints: EndpointState, rollouts: RolloutState) -> None:
        config = endpoints.get(name)
        served = None if config is None else rollouts.served(config)
        self.routes(endpoints)
        self._longpoll.publish(LongPollKey.endpoint(name), served, served)
        if config is None:
            self._endpoints.discard(name)
        else:
            self._endpoints.add(name)

    def on_proxy_nodes(self, nodes: int, endpoints: EndpointState) -> None:
        """Every node's proxies now enforce their new share of each limit."""
        if nodes != self.proxy_nodes:
            self.proxy_nodes = nodes
            self.routes(endpoints)
