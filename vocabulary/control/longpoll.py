"""The long-poll payloads: a backend's replica set and the route table, and a replica's state.

What the proxies receive from the controller (`ReplicaSet` under
`replicas:<backend>`, `RouteTable` under `routes`; the keys are
`vocabulary.control.goal_api.LongPollKey`), and `ReplicaState`, a replica's
lifecycle in the controller. Values only: a replica's Ray handle travels
as an opaque object.
"""

from __future__ import annotations

import enum

from pydantic import BaseModel, ConfigDict

from vocabulary.spec.backends import BatchingConfig
from vocabulary.spec.base import Value
from vocabulary.spec.routing import MultiplexConfig, RoutingConfig

__all__ = [
    "ReplicaState",
    "ReplicaInfo",
    "ReplicaSet",
    "RouteEntry",
    "RouteTable",
]


class ReplicaState(str, enum.Enum):
    SHOULD_START = "SHOULD_START"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    SHOULD_STOP = "SHOULD_STOP"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"


class ReplicaInfo(BaseModel):
    """A RUNNING replica as the proxy sees it: its actor name and handle.

    `handle` is a Ray ActorHandle; it is carried as an opaque object so this
    module needs no Ray import.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    replica_id: str
    actor_name: str
    handle: object = None


class ReplicaSet(Value):
    """Long-poll key `replicas:<backend>`: where a backend's requests may go."""

    backend: str
    max_concurrent_queries: int
    replicas: tuple[ReplicaInfo, ...] = ()
    batching: BatchingConfig | None = None
    # How the proxy chooses among the replicas; None: power_of_two.
    routing: RoutingConfig | None = None
    # Many models per replica: where the model id is read, how many a replica keeps; None: not multiplexed.
    multiplex: MultiplexConfig | None = None
    # An [llm] backend's LoRA adapters: a request whose JSON `model` names one goes to a replica
    # that has it loaded, as a multiplexed backend's model does; empty: none.
    llm_adapters: tuple[str, ...] = ()
    # Seconds a request may wait for a first replica; None: 503 at once.
    cold_start_timeout_s: float | None = None
    # The commit the backend's config was last applied from (`BackendConfig.commit`).
    commit: str | None = None


class RouteEntry(Value):
    route: str
    methods: tuple[str, ...]
    endpoint: str


class RouteTable(Value):
    """Long-poll key `routes`: every endpoint's route, for matching."""

    entries: tuple[RouteEntry, ...] = ()
    # Nodes running proxies: each node's proxies enforce 1/nodes of every `[limits]`.
    nodes: int = 1
