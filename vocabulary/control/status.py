"""Observed state: what the controller reports about the cluster.

`ClusterStatus` is the answer of `GoalAPI.get_status()`. The controller
builds it from its state machines; the agent reads its fields (never
`.get()`) for status, metrics and the status page; fakes build it with the
same constructors. It crosses a Ray call as the model itself and is
JSON-serialisable (`model_dump(mode="json")`): every field is a plain value.

`HandlerError` is a replica's latest handler exception (type, message and
innermost frame of the user's code, `file:line`), made where it was raised
(`HandlerError.of`) and carried by the replica's health-check answer;
`ClusterStatus.serving` (and `endpoint_serving`) is each backend's (endpoint's)
requests over the last minute, from the proxies' own counts.

`ModelStaging` is how far a starting replica's fetch of a model is (its
`staging()` answer); `staging_lines` rolls a backend's up per model, one
line each: `Staging model sentiment: 1.2 / 4.0 GB on 2 nodes`. `ReplicaEjection`
is a replica a proxy ejected as an outlier, for now (`proxy.pool.outliers`).

`Health` orders health codes from best to worst, as Argo's gitops-engine
does, and `worst()` rolls several up into one.
"""

from __future__ import annotations

import enum
import math
import posixpath
import traceback
from types import TracebackType
from typing import Iterable

from pydantic import BaseModel, ConfigDict, Field

from vocabulary.control.goals import GoalState
from vocabulary.control.longpoll import ReplicaState
from vocabulary.control.request_stats import RequestStats
from vocabulary.control.rollouts import CheckCount, Rollout

__all__ = [
    "Health",
    "worst",
    "RestartReason",
    "ProxyState",
    "ReplicaStatus",
    "HandlerError",
    "ModelStaging",
    "staging_lines",
    "ReplicaEjection",
    "BackendStatus",
    "EndpointStatus",
    "ProxyStatus",
    "GoalTiming",
    "ClusterStatus",
]


class Health(str, enum.Enum):
    """Best to worst; the order of declaration is the order of badness."""

    HEALTHY = "Healthy"
    PROGRESSING = "Progressing"
    SUSPENDED = "Suspended"
    DEGRADED = "Degraded"
    MISSING = "Missing"

    @property
    def rank(self) -> int:
        return _HEALTH_ORDER.index(self)


_HEALTH_ORDER = tuple(Health)


def worst(healths: Iterable[Health]) -> Health:
    """The worst of `healths`; HEALTHY when there are none."""
    return max(healths, key=lambda health: health.rank, default=Health.HEALTHY)


class RestartReason(str, enum.Enum):
    """Why the controller replaced a replica (or a proxy, or itself)."""

    STARTUP_FAILED = "startup_failed"
    STARTUP_TIMEOUT = "startup_timeout"
    HEALTH_CHECK = "health_check"
    HEALTH_CHECK_TIMEOUT = "health_check_timeout"
    DIED = "died"
    NODE_LOST = "node_lost"
    LOST = "lost"
    STALLED = "stalled"  # a proxy saw its calls time out with nothing answered (proxy.pool.stalls)
    EJECTED = "ejected"  # a proxy ejected it `replace_after` times as an outlier (proxy.pool.outliers)


class ProxyState(str, enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    DEAD = "dead"
    BACKOFF = "backoff"  # waiting out a failed start before the next try


class _Observed(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ReplicaStatus(_Observed):
    replica_id: str
    state: ReplicaState
    version: str
    node_id: str = ""


class HandlerError(_Observed):
    """The latest exception a replica's handler raised."""

    type: str  # the exception's class name
    message: str
    where: str = ""  # "file:line" of the innermost frame in the user's code (else the innermost of all)
    at: float = 0.0  # wall-clock seconds when it was raised
    replica_id: str = ""

    @classmethod
    def of(cls, error: BaseException, replica_id: str, at: float, root: str) -> HandlerError:
        """`error` as raised below a handler whose code lives under `root` (the replica's working dir)."""
        return cls(type=type(error).__name__, message=str(error)[:500], where=_innermost(error.__traceback__, root),
                   at=at, replica_id=replica_id)

    def describe(self) -> str:
        """`ZeroDivisionError: division by zero at deployments/boom.py:7`."""
        text = f"{self.type}: {self.message}" if self.message else self.type
        return f"{text} at {self.where}" if self.where else text


def _innermost(tb: TracebackType | None, root: str) -> str:
    """`file:line` of the innermost frame under `root` (relative to it), else of the innermost frame."""
    frames = traceback.extract_tb(tb)
    base = posixpath.join(posixpath.normpath(root), "")  # `root` is absolute: the replica's working dir
    for frame in reversed(frames):
        path = posixpath.normpath(frame.filename)
        if path.startswith(base) and "site-packages" not in path:
            return f"{path[len(base):]}:{frame.lineno}"
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""


class ModelStaging(_Observed):
    """A model a starting replica is fetching into its node's cache, and how far it is."""

    model: str
    node_id: str = ""
    done_bytes: int = Field(default=0, ge=0)
    total_bytes: int = Field(default=0, ge=0)  # 0: not known yet


def _size(count: float, unit: tuple[str, float]) -> str:
    return f"{count / unit[1]:.1f}"


def _unit(total: int) -> tuple[str, float]:
    for name, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if total >= size:
            return name, size
    return "bytes", 1.0


def staging_lines(stagings: Iterable[ModelStaging]) -> list[str]:
    """Per model, its fetch over every node fetching it (one fetch per node: the
    furthest report of each node counts): `Staging model m: 1.2 / 4.0 GB on 2 nodes`."""
    by_model: dict[str, dict[str, ModelStaging]] = {}
    for staging in stagings:
        nodes = by_model.setdefault(staging.model, {})
        seen = nodes.get(staging.node_id)
        if seen is None or staging.done_bytes > seen.done_bytes:
            nodes[staging.node_id] = staging
    lines = []
    for model, nodes in sorted(by_model.items()):
        done = sum(s.done_bytes for s in nodes.values())
        total = sum(s.total_bytes for s in nodes.values())
        unit = _unit(max(total, done))
        amount = f"{_size(done, unit)} / {_size(total, unit)} {unit[0]}" if total else f"{_size(done, unit)} {unit[0]}"
        where = f"{len(nodes)} node" + ("" if len(nodes) == 1 else "s")
        lines.append(f"Staging model {model}: {amount} on {where}")
    return lines


class ReplicaEjection(_Observed):
    """A replica a proxy took out of routing for a while as an outlier (`proxy.pool.outliers`)."""

    replica_id: str
    reason: str  # "5 consecutive errors", "success rate 52% over 10 s, its backend's mean 84%"
    count: int = 1  # its ejections so far, this one included
    back_in_s: float = 0.0  # seconds until it takes requests again, when the status was made

    def message(self) -> str:
        """`replica r-3 ejected: 5 consecutive errors, back in 30 s`."""
        times = "" if self.count == 1 else f" (ejection {self.count})"
        return f"replica {self.replica_id} ejected{times}: {self.reason}, back in {math.ceil(self.back_in_s)} s"


class BackendStatus(_Observed):
    version: str
    commit: str | None = None  # the commit the backend's config (its replicas' version) was applied from
    target_replicas: int = Field(ge=0)
    deleting: bool = False
    replicas: tuple[ReplicaStatus, ...] = ()
    restarts: dict[RestartReason, int] = Field(default_factory=dict)
    last_error: str = ""
    failures: int = 0
    unschedulable: str = ""
    pending: str = ""  # why a replica it wants waits to be placed now ("Pending: no node offers {GPU: 4} ...")
    scaling_decisions: dict[str, int] = Field(default_factory=dict)  # direction (up|down) -> count
    latest_error: HandlerError | None = None  # the newest exception its replicas' handlers raised in the last minute
    staging: tuple[ModelStaging, ...] = ()  # models its starting replicas are fetching now
    ejections: tuple[ReplicaEjection, ...] = ()  # its replicas a proxy ejected as outliers, now

    def ready(self) -> int:
        """Replicas RUNNING the backend's current version."""
        return sum(1 for r in self.replicas if r.state is ReplicaState.RUNNING and r.version == self.version)

    def health(self) -> Health:
        if self.ready() >= self.target_replicas:
            return Health.HEALTHY
        if self.failures or self.unschedulable:
            return Health.DEGRADED
        return Health.PROGRESSING


class EndpointStatus(_Observed):
    route: str
    methods: tuple[str, ...] = ("GET", "POST")
    traffic: dict[str, float] = Field(default_factory=dict)
    shadow: dict[str, float] = Field(default_factory=dict)
    timeout_s: float = 30.0


class ProxyStatus(_Observed):
    actor_name: str
    state: ProxyState
    failures: int = 0
    last_error: str = ""
    restarts: int = 0  # times this worker came back as a new process (in place by Ray, or replaced)
    address: str = ""  # "host:port" it serves at: its node's IP (bound to every interface) or its bound host
    worker: int = 0  # which of its node's proxy workers (all share the address, by SO_REUSEPORT)


class ReplicaFailure(_Observed):
    """One replica the controller replaced, numbered in the order it happened."""

    serial: int  # counts from 1 with each controller start
    backend: str
    replica_id: str
    reason: str  # a RestartReason value
    error: str = ""
    at: float = 0.0  # when the controller replaced it, in wall-clock seconds (0: not recorded)

    def ending(self) -> str:
        """How the replica ended, in words: "died", "failed to start"..."""
        return {"died": "died", "health_check": "failed its health check", "lost": "was lost",
                "stalled": "stalled", "startup_failed": "failed to start",
                "ejected": "was ejected as an outlier too often"}.get(self.reason, self.reason)

    def message(self) -> str:
        detail = f": {self.error}" if self.error and self.error != self.reason else ""
        return f"replica {self.replica_id} of backend {self.backend} {self.ending()}{detail}; a replacement starts"


class GoalTiming(_Observed):
    """A finished goal, for `gitops_goal_duration_seconds`."""

    goal_id: str
    kind: str
    name: str
    state: GoalState
    duration_s: float


class NodeResources(_Observed):
    """One alive node's Ray resources (CPU, GPU, memory, custom; not Ray's per-node markers):
    what it has, and what is free now."""

    total: dict[str, float] = Field(default_factory=dict)
    available: dict[str, float] = Field(default_factory=dict)


class ClusterStatus(_Observed):
    nodes: dict[str, NodeResources] = Field(default_factory=dict)  # alive nodes by id: placement's and plan's view
    backends: dict[str, BackendStatus] = Field(default_factory=dict)
    endpoints: dict[str, EndpointStatus] = Field(default_factory=dict)
    proxies: dict[str, ProxyStatus] = Field(default_factory=dict)  # by proxy id: "node" for worker 0, else "node:worker"
    goals_pending: int = 0
    goal_durations: tuple[GoalTiming, ...] = ()  # the last 100 finished
    errors: dict[str, int] = Field(default_factory=dict)  # control-loop errors by where
    ticks: int = 0
    controller_restarts: int = 0  # starts of the controller that found a checkpoint to recover from
    replica_failures: tuple[ReplicaFailure, ...] = ()  # the last 100 replicas replaced, oldest first
    load: dict[str, dict[str, tuple[int, int]]] = Field(default_factory=dict)  # proxy -> backend -> (ongoing, queued)
    rollouts: dict[str, Rollout] = Field(default_factory=dict)  # by endpoint: running, stopped or promoted
    rollout_checks: tuple[CheckCount, ...] = ()  # how often each check passed and failed
    serving: dict[str, RequestStats] = Field(default_factory=dict)  # backend -> its requests in the last minute
    serving_window_s: float = 0.0  # the seconds `serving` covers (up to 60; less just after the controller started)
    # Backend -> the fewer seconds its `serving` covers: since every replica came to run its current version.
    serving_windows: dict[str, float] = Field(default_factory=dict)
    endpoint_serving: dict[str, RequestStats] = Field(default_factory=dict)  # endpoint -> the same, per endpoint

    def health(self) -> Health:
        return worst(backend.health() for backend in self.backends.values())
