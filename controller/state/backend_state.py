"""Backends and their replicas: the replica state machine, as pure logic.

Owns, per backend: the configured `BackendConfig`, the target number of
replicas (`set_target`, the one knob the autoscaler turns), every replica's
state (SHOULD_START -> STARTING -> RUNNING -> SHOULD_STOP -> STOPPING ->
STOPPED, checked against `TRANSITIONS` on every move), the rolling-update
and scaling step (`scale_decisions`, a pure function, within the backend's
`[update]` limits: surge 1, unavailable 0 by default), health checks, failure counting with exponential backoff,
restarts by reason (each one also kept as a `ReplicaFailure` until the
caller takes it, to say so in the log), and the JSON form of all that for
the checkpoint.

It never touches Ray. Each `tick` reads the world through an `Observer`
(probes the adapter answers from finished Ray calls) and returns the side
effects to carry out as plain values; the caller checkpoints first, then
applies them. So every decision is testable with a fake observer and a
hand-moved clock.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from controller.policies.autoscaling import initial_replicas
from vocabulary.control.longpoll import ReplicaState
from vocabulary.spec.backends import BackendConfig, UpdateConfig
from vocabulary.spec.placement import replica_gpus
from vocabulary.control.status import BackendStatus, HandlerError, ModelStaging, ReplicaFailure, ReplicaStatus

__all__ = [
    "BackendState",
    "BackendOptions",
    "Observer",
    "Probe",
    "ProbeStatus",
    "ReplicaRecord",
    "StartReplica",
    "StopReplica",
    "CheckHealth",
    "Reconfigure",
    "DeliverSecrets",
    "KillReplica",
    "Effect",
    "replica_actor_name",
    "TRANSITIONS",
    "IllegalTransition",
    "ScaleDecisions",
    "StopDecision",
    "scale_decisions",
]

LIVE = (ReplicaState.SHOULD_START, ReplicaState.STARTING, ReplicaState.RUNNING)
REPLICA_PREFIX = "gitops-replica-"


class ProbeStatus(str, enum.Enum):
    PENDING = "pending"
    OK = "ok"
    FAILED = "failed"  # user code raised
    DEAD = "dead"  # the actor process is gone


@dataclass(frozen=True)
class Probe:
    status: ProbeStatus
    error: str = ""
    incarnation: int | None = None  # a proxy's answer to a ping: its process; a new one means it restarted
    port: int | None = None  # a proxy's answer to its ready call: the port it listens on (given 0: the one it got)
    handler_error: HandlerError | None = None  # a replica's answer to its health check: its latest handler error


class Observer(Protocol):
    """What the state machine may ask of the world (the Ray adapter, or a fake)."""

    def start_probe(self, actor_name: str) -> Probe: ...

    def came_up(self, actor_name: str) -> bool:
        """Whether Ray has a starting replica's process up (its constructor can run): False
        while the replica waits in Ray's queue of worker processes or its runtime_env's setup."""

    def health_probe(self, actor_name: str) -> Probe | None:
        """The last health check's outcome; None when none is in flight."""

    def drained(self, actor_name: str) -> bool:
        """True once the replica's drain call finished (or none was made); a pure read."""

    def node_of(self, actor_name: str) -> str: ...

    def staging(self, actor_name: str) -> tuple[ModelStaging, ...]:
        """The models a starting replica is fetching, and how far each is (its last answer)."""

    def node_alive(self, node_id: str) -> bool:
        """False once the cluster has declared `node_id` dead."""

    def cannot_fit(self, config: BackendConfig, count: int) -> str:
        """Why `count` more replicas of `config` (its actor's resources, its
        placement's bundles, its max_replicas_per_node) cannot be placed now; "" when they can."""


# --- effects ------------------------------------------------------------------


@dataclass(frozen=True)
class StartReplica:
    actor_name: str
    replica_id: str
    config: BackendConfig


@dataclass(frozen=True)
class StopReplica:
    actor_name: str
    graceful_timeout_s: float  # 0 = kill at once (after reading its last output, when `failed`)
    # Replaced as broken: its last output is read before it is killed (`gitops logs --previous`),
    # for at most `BackendOptions.stop_grace_s`.
    failed: bool = False


@dataclass(frozen=True)
class CheckHealth:
    actor_name: str


@dataclass(frozen=True)
class Reconfigure:
    actor_name: str
    user_config: Any


@dataclass(frozen=True)
class DeliverSecrets:
    """A running replica receives its backend's new secret values (a rotation in place)."""

    actor_name: str
    config: BackendConfig


@dataclass(frozen=True)
class KillReplica:
    """A stopped replica's actor goes away (after its drain, or past its deadline)."""

    actor_name: str


Effect = StartReplica | StopReplica | CheckHealth | Reconfigure | KillReplica | DeliverSecrets


@dataclass(frozen=True)
class BackendOptions:
    startup_timeout_s: float = 60.0
    # How long Ray may take to bring a replica's process up (its queue of worker starts,
    # its runtime_env's setup, whose own limit is 600 s), before its startup timeout starts.
    process_start_timeout_s: float = 600.0
    max_failures: int = 3
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0
    # Extra time past graceful_shutdown_timeout_s before a kill, for the drain call itself.
    stop_grace_s: float = 2.0
    unschedulable_grace_s: float = 3.0


def _startup_s(config: BackendConfig, options: BackendOptions) -> float:
    """How long a replica's code may take to become ready: the backend's own limit, else the controller's."""
    return config.startup_timeout_s if config.startup_timeout_s is not None else options.startup_timeout_s


def _staging_s(config: BackendConfig) -> float:
    """How long a replica may stage its models (each within its load_timeout_s) before its code starts."""
    return sum(model.load_timeout_s for model in config.model_sources.values())


def replica_actor_name(replica_id: str) -> str:
    return REPLICA_PREFIX + replica_id


_S = ReplicaState
# Every move a replica may make. Recovery after a restart re-issues a
# command, so SHOULD_START and SHOULD_STOP may be entered again from
# themselves and from the state that was carrying them out.
TRANSITIONS: dict[ReplicaState, frozenset[ReplicaState]] = {
    _S.SHOULD_START: frozenset({_S.STARTING, _S.SHOULD_START, _S.SHOULD_STOP}),
    _S.STARTING: frozenset({_S.RUNNING, _S.SHOULD_START, _S.SHOULD_STOP}),
    _S.RUNNING: frozenset({_S.SHOULD_STOP}),
    _S.SHOULD_STOP: frozenset({_S.STOPPING, _S.SHOULD_STOP}),
    _S.STOPPING: frozenset({_S.STOPPED, _S.SHOULD_STOP}),
    _S.STOPPED: frozenset(),
}


class IllegalTransition(ValueError):
    """A replica was asked to make a move `TRANSITIONS` does not allow (a bug)."""


@dataclass
class ReplicaRecord:
    replica_id: str
    version: str
    state: ReplicaState
    since: float = 0.0
    node_id: str = ""
    last_health: float = 0.0
    health_in_flight: bool = False
    force_stop: bool = False
    failed: bool = False  # replaced as broken (`_fail`): its last output is kept
    checked_ok: bool = False
    staging: tuple[ModelStaging, ...] = ()  # while starting: the models it fetches, how far each is
    # While starting: when its startup timeout started, the last tick its process was not up
    # yet (Ray starts worker processes a few at a time); None: not observed yet.
    up_since: float | None = None

    @property
    def actor_name(self) -> str:
        return replica_actor_name(self.replica_id)

    def move(self, state: ReplicaState, now: float) -> None:
        if state not in TRANSITIONS[self.state]:
            raise IllegalTransition(
                f"replica {self.replica_id}: {self.state.value} -> {state.value} is not allowed"
            )
        self.state = state
        self.since = now


@dataclass
class _Backend:
    config: BackendConfig
    target: int
    deleting: bool = False
    failures: int = 0
    last_error: str = ""
    latest_error: HandlerError | None = None  # the newest handler exception its replicas reported (not kept)
    backoff_until: float = 0.0
    unschedulable: str = ""
    unschedulable_since: float | None = None
    pending: str = ""  # why a replica it wants waits to be placed, now: "Pending: no node offers ..."
    restarts: Counter = field(default_factory=Counter)
    replicas: list[ReplicaRecord] = field(default_factory=list)

    def live(self) -> list[ReplicaRecord]:
        return [r for r in self.replicas if r.state in LIVE]


class BackendState:
    def __init__(self, options: BackendOptions | None = None) -> None:
        self.options = options or BackendOptions()
        self._backends: dict[str, _Backend] = {}
        self._failures: list[ReplicaFailure] = []
        self._failure_serial = 0
        # Replica ids are never reused, not even by a backend deleted and
        # created again: a reused actor name could find the old actor still
        # draining (get-or-create), and proxies would route to a dying replica.
        self._next_serial = 0
        self.dirty = False  # something worth a checkpoint changed

    # --- the goal API's writes ------------------------------------------------

    def apply(self, config: BackendConfig) -> list[Effect]:
        """Create or update; returns in-place effects (reconfigure) to carry out."""
        current = self._backends.get(config.name)
        if current is None or current.deleting:
            self._backends[config.name] = _Backend(
                config=config, target=_initial_target(config),
                replicas=current.replicas if current else [],
            )
            self.dirty = True
            return []
        if current.config == config:
            return []
        effects: list[Effect] = []
        if config.version != current.config.version:
            current.failures, current.last_error, current.backoff_until = 0, "", 0.0
        else:
            running = [r for r in current.live() if r.state != ReplicaState.SHOULD_START]
            if config.user_config != current.config.user_config:
                effects = [Reconfigure(r.actor_name, config.user_config) for r in running]
            if config.secret_digests != current.config.secret_digests:
                effects += [DeliverSecrets(r.actor_name, config) for r in running]
        if config.autoscaling is not None:
            # Git owns the bounds, the autoscaler the count: keep it, within the new bounds.
            current.target = initial_replicas(config.autoscaling, current.target)
        elif config.num_replicas != current.config.num_replicas or current.config.autoscaling is not None:
            current.target = config.num_replicas
        current.config = config
        self.dirty = True
        return effects

    def delete(self, name: str) -> None:
        backend = self._backends.get(name)
        if backend is not None and not backend.deleting:
            backend.deleting = True
            backend.target = 0
            self.dirty = True

    def set_target(self, name: str, target: int) -> None:
        """The single place the number of wanted replicas is set (autoscaler too)."""
        backend = self._backends.get(name)
        if backend is not None and not backend.deleting and backend.target != target:
            backend.target = max(0, target)
            self.dirty = True

    # --- reads ------------------------------------------------------------------

    def names(self) -> list[str]:
        return list(self._backends)

    def configs(self) -> dict[str, BackendConfig]:
        return {n: b.config for n, b in self._backends.items() if not b.deleting}

    def config(self, name: str) -> BackendConfig | None:
        backend = self._backends.get(name)
        return None if backend is None or backend.deleting else backend.config

    def exists(self, name: str) -> bool:
        return name in self._backends

    def target(self, name: str) -> int:
        return self._backends[name].target

    def replicas(self, name: str) -> list[ReplicaRecord]:
        """Every replica `name` has, whatever its state; ValueError for an unknown backend."""
        backend = self._backends.get(name)
        if backend is None:
            raise ValueError(f"unknown backend {name!r}")
        return list(backend.replicas)

    def running(self, name: str) -> list[ReplicaRecord]:
        backend = self._backends.get(name)
        if backend is None:
            return []
        return [r for r in backend.replicas if r.state == ReplicaState.RUNNING]

    def all_actor_names(self) -> set[str]:
        return {r.actor_name for b in self._backends.values() for r in b.replicas}

    def readiness(self, name: str, version: str) -> tuple[str, str]:
        """("met" | "failed" | "pending" | "superseded", reason) for a version."""
        backend = self._backends.get(name)
        if backend is None or backend.deleting or backend.config.version != version:
            return "superseded", ""
        if backend.failures >= self.options.max_failures:
            return "failed", backend.last_error
        if backend.unschedulable:
            return "failed", backend.unschedulable
        live = backend.live()
        wanted = [r for r in live if r.version == version and r.state == ReplicaState.RUNNING]
        if len(wanted) == backend.target and len(live) == backend.target:
            return "met", ""
        return "pending", ""

    def serving_version(self, name: str) -> str | None:
        """The version every live replica of `name` runs; None while two versions
        serve (a rolling update), or none does."""
        backend = self._backends.get(name)
        versions = {r.version for r in backend.live()} if backend is not None else set()
        return versions.pop() if len(versions) == 1 else None

    def is_gone(self, name: str) -> bool:
        return name not in self._backends

    def status(self, name: str) -> BackendStatus:
        backend = self._backends[name]
        return BackendStatus(
            version=backend.config.version,
            commit=backend.config.commit,
            target_replicas=backend.target,
            deleting=backend.deleting,
            replicas=tuple(
                ReplicaStatus(replica_id=r.replica_id, state=r.state, version=r.version, node_id=r.node_id)
                for r in backend.replicas
            ),
            restarts=dict(backend.restarts),
            last_error=backend.last_error,
            failures=backend.failures,
            unschedulable=backend.unschedulable,
            pending=backend.pending,
            latest_error=backend.latest_error,
            staging=tuple(
                staged for r in backend.replicas if r.state == ReplicaState.STARTING for staged in r.staging
            ),
        )

    def check_soon(self, name: str) -> None:
        """Health-check `name`'s running replicas at the next tick (their answers carry
        their latest handler errors): its proxies just counted new 5xx answers."""
        backend = self._backends.get(name)
        for record in backend.replicas if backend is not None else ():
            if record.state == ReplicaState.RUNNING and not record.health_in_flight:
                record.last_health = float("-inf")

    def replace_stalled(self, name: str, replica_id: str, error: str, now: float, reason: str = "stalled") -> bool:
        """A proxy found `replica_id` hung (`proxy.pool.stalls`: its calls time out and it answers
        nothing, though its health check may pass), or (`reason` "ejected") ejected it as an outlier
        too often (`proxy.pool.outliers`): replace it like a failed one, with that reason.
        False when it is not a running replica of `name` (already replaced, or a repeat report
        from another proxy)."""
        backend = self._backends.get(name)
        for record in backend.replicas if backend is not None else ():
            if record.replica_id == replica_id and record.state == ReplicaState.RUNNING:
                assert backend is not None
                self._fail(backend, record, now, reason, error, counts=True)
                return True
        return False

    # --- the control loop ------------------------------------------------------

    def _failed(self, backend: str, replica_id: str, reason: str, error: str) -> None:
        self._failure_serial += 1
        self._failures.append(ReplicaFailure(
            serial=self._failure_serial, backend=backend, replica_id=replica_id, reason=reason, error=error))

    def take_failures(self) -> list[ReplicaFailure]:
        """The replicas replaced since the last call, oldest first."""
        failures, self._failures = self._failures, []
        return failures

    def tick(self, now: float, observer: Observer) -> list[Effect]:
        """Observe every replica, decide scaling, and return the effects to apply."""
        effects: list[Effect] = []
        for name in list(self._backends):
            backend = self._backends[name]
            self._observe(backend, now, observer, effects)
            self._scale(backend, now, observer)
            effects.extend(self._act(backend, now))
            if backend.deleting and not backend.replicas:
                del self._backends[name]
                self.dirty = True
        return effects

    def _observe(
        self, backend: _Backend, now: float, observer: Observer, effects: list[Effect]
    ) -> None:
        for record in list(backend.replicas):
            if record.state == ReplicaState.STARTING:
                self._observe_starting(backend, record, now, observer)
            elif record.state == ReplicaState.RUNNING:
                self._observe_running(backend, record, now, observer, effects)
            elif record.state == ReplicaState.STOPPING:
                deadline = record.since + backend.config.graceful_shutdown_timeout_s
                if observer.drained(record.actor_name) or now >= deadline + self.options.stop_grace_s:
                    record.move(ReplicaState.STOPPED, now)
                    effects.append(KillReplica(record.actor_name))
                    self.dirty = True
            elif record.state == ReplicaState.STOPPED:
                backend.replicas.remove(record)
                self.dirty = True

    def _observe_starting(
        self, backend: _Backend, record: ReplicaRecord, now: float, observer: Observer
    ) -> None:
        probe = observer.start_probe(record.actor_name)
        # The startup timeout is the replica's code's: its clock starts once Ray has the process up.
        waiting = probe.status == ProbeStatus.PENDING and not observer.came_up(record.actor_name)
        if waiting or record.up_since is None:
            record.up_since = now if waiting else record.since
        up_since = record.up_since
        if probe.status == ProbeStatus.PENDING and backend.config.model_sources:
            record.staging = observer.staging(record.actor_name)  # shown by status, never checkpointed
        if probe.status == ProbeStatus.OK:
            record.staging = ()
            record.move(ReplicaState.RUNNING, now)
            record.node_id = observer.node_of(record.actor_name)
            record.last_health = now
            self.dirty = True
        elif probe.status in (ProbeStatus.FAILED, ProbeStatus.DEAD):
            reason = "startup_failed" if probe.status == ProbeStatus.FAILED else "died"
            self._fail(backend, record, now, reason, probe.error, counts=True)
        elif now - up_since >= (limit := _startup_s(backend.config, self.options) + _staging_s(backend.config)):
            error = f"replica {record.replica_id} not ready within {limit:g}s"
            self._fail(backend, record, now, "startup_timeout", error, counts=True)
        elif waiting and now - record.since >= (waited := self.options.process_start_timeout_s):
            error = f"replica {record.replica_id}: Ray did not start its process within {waited:g}s"
            self._fail(backend, record, now, "startup_timeout", error, counts=True)

    def _observe_running(
        self, backend: _Backend, record: ReplicaRecord, now: float,
        observer: Observer, effects: list[Effect],
    ) -> None:
        config = backend.config
        if record.node_id and not observer.node_alive(record.node_id):
            # Faster than waiting for a health check to time out on a lost node.
            self._fail(backend, record, now, "node_lost", f"node {record.node_id} is gone", counts=False)
            return
        if record.health_in_flight:
            probe = observer.health_probe(record.actor_name)
            if probe is None or probe.status == ProbeStatus.PENDING:
                if now - record.last_health >= config.health_check_timeout_s:
                    error = f"health check of {record.replica_id} timed out"
                    self._fail(backend, record, now, "health_check_timeout", error, counts=True)
                return
            record.health_in_flight = False
            if probe.status == ProbeStatus.OK:
                backend.latest_error = _newer(backend.latest_error, probe.handler_error)
                if not record.checked_ok:
                    record.checked_ok = True
                    backend.failures = 0
                return
            if probe.status == ProbeStatus.DEAD:
                self._fail(backend, record, now, "died", probe.error, counts=False)
            else:
                self._fail(backend, record, now, "health_check", probe.error, counts=True)
            return
        if now - record.last_health >= config.health_check_period_s:
            record.last_health = now
            record.health_in_flight = True
            effects.append(CheckHealth(record.actor_name))

    def _fail(
        self, backend: _Backend, record: ReplicaRecord, now: float,
        reason: str, error: str, counts: bool,
    ) -> None:
        """Replace a broken replica: kill it now and back off before the next start."""
        backend.restarts[reason] += 1
        self._failed(backend.config.name, record.replica_id, reason, error)
        backend.last_error = error or reason
        if counts:
            backend.failures += 1
            delay = self.options.backoff_base_s * 2 ** (backend.failures - 1)
            backend.backoff_until = now + min(delay, self.options.backoff_max_s)
        record.force_stop = True
        record.failed = True
        record.health_in_flight = False
        record.move(ReplicaState.SHOULD_STOP, now)
        self.dirty = True

    def _scale(self, backend: _Backend, now: float, observer: Observer) -> None:
        """Carry out `scale_decisions`: stops at once, starts unless backing off or no room."""
        update = backend.config.update or UpdateConfig()
        decisions = scale_decisions(
            backend.live(), backend.target, backend.config.version,
            max_surge=update.max_surge, max_unavailable=update.max_unavailable,
        )
        records = {r.replica_id: r for r in backend.replicas}
        why = observer.cannot_fit(backend.config, 1) if decisions.start > 0 else ""
        if why and not decisions.stop and _surge_blocked(backend, update):
            # No spare GPUs for a surge replica: the update goes one at a time, in place.
            decisions = scale_decisions(
                backend.live(), backend.target, backend.config.version,
                max_surge=0, max_unavailable=max(1, update.max_unavailable),
            )
        for stop in decisions.stop:
            self._stop(records[stop.replica_id], now, force=stop.force)
        backend.pending = f"Pending: {why}" if why else ""
        if decisions.start <= 0 or now < backend.backoff_until:
            return
        if why and _draining(backend):
            # Its own replicas are stopping and give their resources back (max_surge = 0
            # replaces in place on a full cluster): wait for them, that is not unschedulable.
            backend.unschedulable_since = None
            return
        if why:
            if backend.unschedulable_since is None:
                backend.unschedulable_since = now
            if now - backend.unschedulable_since >= self.options.unschedulable_grace_s:
                backend.unschedulable = f"cluster cannot fit a replica of {backend.config.name}: {why}"
            return
        backend.unschedulable, backend.unschedulable_since = "", None
        for _ in range(decisions.start):
            self._add(backend, now)

    def _add(self, backend: _Backend, now: float) -> None:
        version = backend.config.version
        replica_id = f"{backend.config.name}-{version[:8]}-{self._next_serial}"
        self._next_serial += 1
        backend.replicas.append(ReplicaRecord(replica_id, version, ReplicaState.SHOULD_START, now))
        self.dirty = True

    def _stop(self, record: ReplicaRecord, now: float, force: bool) -> None:
        record.force_stop = record.force_stop or force
        record.move(ReplicaState.SHOULD_STOP, now)
        self.dirty = True

    def _act(self, backend: _Backend, now: float) -> list[Effect]:
        """Turn SHOULD_* records into effects; the caller checkpoints before applying."""
        effects: list[Effect] = []
        for record in backend.replicas:
            if record.state == ReplicaState.SHOULD_START:
                effects.append(StartReplica(record.actor_name, record.replica_id, backend.config))
                record.move(ReplicaState.STARTING, now)
            elif record.state == ReplicaState.SHOULD_STOP:
                timeout = 0.0 if record.force_stop else backend.config.graceful_shutdown_timeout_s
                effects.append(StopReplica(record.actor_name, timeout, failed=record.failed))
                record.move(ReplicaState.STOPPING, now)
                if record.force_stop:
                    # A killed replica has nothing to drain; don't wait out the grace.
                    record.since = now - backend.config.graceful_shutdown_timeout_s
        return effects

    # --- checkpoint form and recovery ---------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "next_serial": self._next_serial,
            "backends": {name: _backend_json(b) for name, b in self._backends.items()},
        }

    @classmethod
    def from_json(
        cls, data: dict[str, Any], options: BackendOptions | None = None
    ) -> BackendState:
        state = cls(options)
        state._next_serial = int(data["next_serial"])
        for name, item in data["backends"].items():
            state._backends[name] = _backend_from(item)
        return state

    def recover(self, now: float, found: set[str]) -> list[Effect]:
        """After a restart: adopt replicas still alive (`found`), replace lost ones.

        RUNNING replicas that still exist keep serving untouched; ones that
        were being started are started again (starting is get-or-create, so
        no duplicate actor); anything on its way out is stopped again.
        """
        effects: list[Effect] = []
        for backend in self._backends.values():
            for record in list(backend.replicas):
                record.health_in_flight = False
                if record.state == ReplicaState.RUNNING:
                    if record.actor_name in found:
                        record.last_health = now
                    else:
                        backend.restarts["lost"] += 1
                        self._failed(backend.config.name, record.replica_id, "lost", "")
                        backend.replicas.remove(record)
                elif record.state in (ReplicaState.SHOULD_START, ReplicaState.STARTING):
                    record.move(ReplicaState.SHOULD_START, now)
                elif record.state in (ReplicaState.SHOULD_STOP, ReplicaState.STOPPING):
                    record.force_stop = True
                    record.move(ReplicaState.SHOULD_STOP, now)
                else:
                    effects.append(StopReplica(record.actor_name, 0.0))
                    backend.replicas.remove(record)
        self.dirty = True
        return effects


# --- the rolling-update and scaling step ---------------------------------------


@dataclass(frozen=True)
class StopDecision:
    replica_id: str
    force: bool  # kill at once instead of draining


@dataclass(frozen=True)
class ScaleDecisions:
    """What one scaling step does: replicas to stop, and how many to start."""

    stop: tuple[StopDecision, ...] = ()
    start: int = 0


def _newer(held: HandlerError | None, reported: HandlerError | None) -> HandlerError | None:
    """The later of two handler errors (a replica answers its latest again and again)."""
    if reported is None or (held is not None and held.at >= reported.at):
        return held
    return reported


def scale_decisions(
    replicas: Sequence[ReplicaRecord], target: int, version: str, *,
    max_surge: int = 1, max_unavailable: int = 0,
) -> ScaleDecisions:
    """One step towards `target` RUNNING replicas of `version` (pure).

    `replicas` are the backend's live ones (SHOULD_START, STARTING, RUNNING).
    Old versions that are not running are stopped at once; old running ones
    are kept while the new version is short of `target - max_unavailable`
    running; new replicas are started up to `target`, and while old ones
    still serve, at most `max_surge` above `target` in all. Extra new
    replicas are stopped least useful first.
    """
    new = [r for r in replicas if r.version == version]
    old = [r for r in replicas if r.version != version]
    stop = [StopDecision(r.replica_id, True) for r in old if r.state != ReplicaState.RUNNING]
    old_running = [r for r in old if r.state == ReplicaState.RUNNING]
    new_running = sum(1 for r in new if r.state == ReplicaState.RUNNING)
    keep_old = max(0, target - max_unavailable - new_running)
    stop += [StopDecision(r.replica_id, False) for r in old_running[keep_old:]]
    old_kept = min(keep_old, len(old_running))
    if len(new) > target:
        extra = _stop_order(new)[: len(new) - target]
        stop += [StopDecision(r.replica_id, r.state != ReplicaState.RUNNING) for r in extra]
        return ScaleDecisions(tuple(stop))
    missing = target - len(new)
    if old_kept:
        missing = min(missing, target + max_surge - len(new) - old_kept)
    return ScaleDecisions(tuple(stop), max(0, missing))


def _initial_target(config: BackendConfig) -> int:
    if config.autoscaling is not None:
        return config.autoscaling.min_replicas
    return config.num_replicas


def _stop_order(records: list[ReplicaRecord]) -> list[ReplicaRecord]:
    """Least useful first: not yet started, then starting, then running."""
    rank = {ReplicaState.SHOULD_START: 0, ReplicaState.STARTING: 1, ReplicaState.RUNNING: 2}
    return sorted(records, key=lambda r: rank[r.state])


def _backend_json(backend: _Backend) -> dict[str, Any]:
    return {
        "config": backend.config.model_dump(mode="json"),
        "target": backend.target,
        "deleting": backend.deleting,
        "failures": backend.failures,
        "last_error": backend.last_error,
        "restarts": dict(backend.restarts),
        "replicas": [
            {"replica_id": r.replica_id, "version": r.version, "state": r.state.value,
             "node_id": r.node_id, "force_stop": r.force_stop}
            for r in backend.replicas
        ],
    }


def _backend_from(item: dict[str, Any]) -> _Backend:
    return _Backend(
        config=BackendConfig.model_validate(item["config"]),
        target=int(item["target"]),
        deleting=bool(item["deleting"]),
        failures=int(item.get("failures", 0)),
        last_error=item.get("last_error", ""),
        restarts=Counter(item.get("restarts", {})),
        replicas=[
            ReplicaRecord(
                replica_id=r["replica_id"], version=r["version"],
                state=ReplicaState(r["state"]), node_id=r.get("node_id", ""),
                force_stop=bool(r.get("force_stop", False)),
            )
            for r in item["replicas"]
        ],
    )


def _surge_blocked(backend: _Backend, update: UpdateConfig) -> bool:
    """A rolling update of a GPU backend whose surge replica finds no room: it may
    replace its old replicas one at a time instead (docs/guides/llm.md)."""
    if update.max_surge == 0 or replica_gpus(backend.config.placement, backend.config.ray_actor_options) <= 0:
        return False
    version = backend.config.version
    return any(r.version != version and r.state == ReplicaState.RUNNING for r in backend.live())


def _draining(backend: _Backend) -> bool:
    return any(r.state in (ReplicaState.SHOULD_STOP, ReplicaState.STOPPING) for r in backend.replicas)
