"""The goal API's vocabulary: backend, endpoint and serving-state values.

These frozen models are what the agent asks for (its desired state), what
the controller stores, checkpoints as JSON and reports back (the actual
state), and what the proxy receives by long poll. They are plain values: no
Ray, no git, no I/O.

Each field is declared here once, with its default, its range and a
`description` (what a user reads about the spec key of the same name). The
spec file format (`gitops.specs.models`) derives its tables from these
models and adds only file concerns: strict TOML typing, unknown keys
rejected, keys a file may leave out (`version`) or that only a file has
(`code_paths`).

Comparison rules live here so that every component agrees on them:
`BackendConfig.code_identity()` says what forces a restart, and
`BackendConfig.comparable()` is what the planner diffs.
"""

from __future__ import annotations

import enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from vocabulary.serving_rules import zero_replica_reason

__all__ = [
    "AutoscalingConfig",
    "BackendConfig",
    "EndpointConfig",
    "ServingState",
    "GoalState",
    "GoalResult",
    "ReplicaState",
    "ReplicaInfo",
    "ReplicaSet",
    "RouteEntry",
    "RouteTable",
]

class _Value(BaseModel):
    # Numbers are finite everywhere: configs travel as JSON, and Ray rejects inf and nan.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class AutoscalingConfig(_Value):
    """A backend's replica count bounds and the load the autoscaler aims for."""

    min_replicas: int = Field(
        default=1, ge=0, description="Fewest replicas the autoscaler keeps; 0 lets an idle backend stop."
    )
    max_replicas: int = Field(ge=1, description="Most replicas the autoscaler starts.")
    target_ongoing_requests: float = Field(
        default=2.0, gt=0, description="Requests in flight per replica the autoscaler aims for."
    )
    upscale_delay_s: float = Field(
        default=5.0, ge=0, description="Seconds the load must stay above target before adding replicas."
    )
    downscale_delay_s: float = Field(
        default=30.0, ge=0, description="Seconds the load must stay below target before removing replicas."
    )


class BackendConfig(_Value):
    """One backend as the controller runs it.

    `version` identifies the code; replicas restart exactly when it changes.
    `working_dir` is where this version's code can be fetched from; any
    export with the same version holds the same code, so it never causes a
    restart on its own and is left out of comparisons.
    """

    name: str = Field(description="The backend's name: the key of its [backends.NAME] table.")
    version: str = Field(
        description="What the replicas' code is: the spec's `version`, else a hash of the code paths and code fields."
    )
    import_path: str = Field(
        description="`package.module:attribute` of the class or function that handles requests, "
        "resolved from the repository root."
    )
    init_args: tuple[Any, ...] = Field(
        default=(), description="Positional arguments for the class's constructor (a class only)."
    )
    init_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments for the class's constructor (a class only)."
    )
    num_replicas: int = Field(
        default=1, ge=0, description="Replicas to run; not together with [autoscaling], which starts at its minimum."
    )
    max_concurrent_queries: int = Field(
        default=100, ge=1, description="Requests one replica handles at once; more wait in the proxy."
    )
    user_config: Any = Field(
        default=None, description="Any value, passed to the replica's `reconfigure()`; a change restarts nothing."
    )
    graceful_shutdown_timeout_s: float = Field(
        default=20.0, ge=0, description="Seconds a stopping replica may finish its requests before it is killed."
    )
    health_check_period_s: float = Field(
        default=10.0, gt=0, description="Seconds between two health checks of a replica."
    )
    health_check_timeout_s: float = Field(
        default=30.0, gt=0, description="Seconds a health check may take before the replica is replaced."
    )
    ray_actor_options: dict[str, Any] = Field(
        default_factory=dict,
        description="Resources of each replica's Ray actor: num_cpus, num_gpus, memory (bytes), resources.",
    )
    runtime_env: dict[str, Any] = Field(
        default_factory=dict, description="The replicas' Ray runtime environment: env_vars and pip packages."
    )
    autoscaling: AutoscalingConfig | None = Field(
        default=None, description="Scale the replica count with load, within bounds; none: a fixed count."
    )
    working_dir: str | None = Field(
        default=None, description="Where this version's code is fetched from (an export of the applied commit)."
    )

    def comparable(self) -> dict[str, Any]:
        """Every field that matters to the cluster, without `working_dir`."""
        return self.model_dump(mode="json", exclude={"working_dir"})

    def code_identity(self) -> str:
        """What a running replica is bound to: change it and replicas restart."""
        return self.version

    def can_have_zero_replicas(self) -> bool:
        return zero_replica_reason(self) is not None


class EndpointConfig(_Value):
    """A route of the proxy and how its requests are shared between backends."""

    name: str = Field(description="The endpoint's name: the key of its [endpoints.NAME] table.")
    route: str = Field(description="Path prefix this endpoint serves; the longest matching prefix wins.")
    methods: tuple[str, ...] = Field(
        default=("GET", "POST"), description="HTTP methods the route accepts (upper case); GET implies HEAD."
    )
    traffic: dict[str, float] = Field(
        description="Backend name -> share of the requests it answers, from 0 to 1; the shares sum to 1."
    )
    shadow: dict[str, float] = Field(
        default_factory=dict,
        description="Backend name -> share of the requests copied to it; its replies never reach clients.",
    )
    timeout_s: float = Field(
        default=30.0, gt=0, description="Seconds a request may take before the client gets 504."
    )

    def backends(self) -> frozenset[str]:
        """Every backend this endpoint sends requests to, primary or shadow."""
        return frozenset(self.traffic) | frozenset(self.shadow)


class ServingState(_Value):
    """A whole serving configuration: desired (from git) or actual (controller)."""

    backends: dict[str, BackendConfig] = Field(default_factory=dict)
    endpoints: dict[str, EndpointConfig] = Field(default_factory=dict)


# --- goals -----------------------------------------------------------------


class GoalState(str, enum.Enum):
    PENDING = "pending"
    MET = "met"
    FAILED = "failed"
    SUPERSEDED = "superseded"


class GoalResult(_Value):
    goal_id: str
    state: GoalState
    reason: str = ""


# --- replicas and the long-poll payloads --------------------------------------


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
    handle: Any = None


class ReplicaSet(_Value):
    """Long-poll key `replicas:<backend>`: where a backend's requests may go."""

    backend: str
    max_concurrent_queries: int
    replicas: tuple[ReplicaInfo, ...] = ()


class RouteEntry(_Value):
    route: str
    methods: tuple[str, ...]
    endpoint: str


class RouteTable(_Value):
    """Long-poll key `routes`: every endpoint's route, for matching."""

    entries: tuple[RouteEntry, ...] = ()
