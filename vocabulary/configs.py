"""The goal API's vocabulary: backend, endpoint and serving-state values.

These frozen models are what the agent asks for (its desired state), what
the controller stores, checkpoints as JSON and reports back (the actual
state), and what the proxy receives by long poll. They are plain values: no
Ray, no git, no I/O, and no spec-file concerns (file locations, defaults
from TOML) — those belong to `gitops.specs.models`.

Comparison rules live here so that every component agrees on them:
`BackendConfig.code_identity()` says what forces a restart, and
`BackendConfig.comparable()` is what the planner diffs.
"""

from __future__ import annotations

import enum
import math
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field

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
    "WEIGHT_TOLERANCE",
    "weights_sum_to_one",
]

WEIGHT_TOLERANCE = 1e-6


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class AutoscalingConfig(_Value):
    min_replicas: int = Field(ge=0)
    max_replicas: int = Field(ge=1)
    target_ongoing_requests: float = Field(gt=0)
    upscale_delay_s: float = Field(default=5.0, ge=0)
    downscale_delay_s: float = Field(default=30.0, ge=0)


class BackendConfig(_Value):
    """One backend as the controller runs it.

    `version` identifies the code; replicas restart exactly when it changes.
    `working_dir` is where this version's code can be fetched from; any
    export with the same version holds the same code, so it never causes a
    restart on its own and is left out of comparisons.
    """

    name: str
    version: str
    import_path: str
    init_args: tuple[Any, ...] = ()
    init_kwargs: dict[str, Any] = Field(default_factory=dict)
    num_replicas: int = Field(default=1, ge=0)
    max_concurrent_queries: int = Field(default=100, ge=1)
    user_config: Any = None
    graceful_shutdown_timeout_s: float = Field(default=20.0, ge=0)
    health_check_period_s: float = Field(default=10.0, gt=0)
    health_check_timeout_s: float = Field(default=30.0, gt=0)
    ray_actor_options: dict[str, Any] = Field(default_factory=dict)
    runtime_env: dict[str, Any] = Field(default_factory=dict)
    autoscaling: AutoscalingConfig | None = None
    working_dir: str | None = None

    def comparable(self) -> dict[str, Any]:
        """Every field that matters to the cluster, without `working_dir`."""
        return self.model_dump(mode="json", exclude={"working_dir"})

    def code_identity(self) -> str:
        """What a running replica is bound to: change it and replicas restart."""
        return self.version

    def can_have_zero_replicas(self) -> bool:
        if self.autoscaling is not None:
            return self.autoscaling.min_replicas == 0
        return self.num_replicas == 0


class EndpointConfig(_Value):
    name: str
    route: str
    methods: tuple[str, ...] = ("GET", "POST")
    traffic: dict[str, float]
    shadow: dict[str, float] = Field(default_factory=dict)
    timeout_s: float = Field(default=30.0, gt=0)

    def backends(self) -> frozenset[str]:
        """Every backend this endpoint sends requests to, primary or shadow."""
        return frozenset(self.traffic) | frozenset(self.shadow)


class ServingState(_Value):
    """A whole serving configuration: desired (from git) or actual (controller)."""

    backends: dict[str, BackendConfig] = Field(default_factory=dict)
    endpoints: dict[str, EndpointConfig] = Field(default_factory=dict)


def weights_sum_to_one(weights: Mapping[str, float]) -> bool:
    return math.isclose(sum(weights.values()), 1.0, abs_tol=WEIGHT_TOLERANCE)


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
