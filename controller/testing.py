"""Fakes of the controller's two edges, for tests of every tier.

`FakeAdapter` is a cluster in memory that satisfies
`controller.loop.ClusterAdapter` (and so `backend_state.Observer`):
replicas it is told to start are ready at once (or fail with `start_error`),
probes can be set per actor, and it records what it was asked to do.
`MemoryStorage` is a checkpoint storage in memory.

Shipped with the code so the state machines and `ControllerActor` run
without Ray; nothing here is used in production.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Awaitable, Sequence

from controller.state.backend_state import (
    REPLICA_PREFIX,
    Effect,
    KillReplica,
    Probe,
    ProbeStatus,
    StartReplica,
    StopReplica,
)
from controller.persistence.checkpoint import Storage
from controller.state.proxy_fleet import ProxyEffect
from vocabulary.replicas.replica_output import OutputCursor, ReplicaOutput
from vocabulary.control.status import ModelStaging, NodeResources
from vocabulary.spec.backends import BackendConfig

__all__ = ["FakeAdapter", "MemoryStorage"]

OK = Probe(ProbeStatus.OK)


class MemoryStorage:
    """A checkpoint storage in memory that counts its writes."""

    def __init__(self) -> None:
        self.data: bytes | None = None
        self.writes = 0

    def put(self, data: bytes) -> None:
        self.data = data
        self.writes += 1

    def get(self) -> bytes | None:
        return self.data

    def delete(self) -> None:
        self.data = None


@dataclass
class FakeAdapter:
    """A cluster in memory.

    - `starts`: each actor's start probe (PENDING when absent); a started
      replica gets OK, or FAILED with `start_error`.
    - `health`: the next health probe per actor, consumed when read; OK when absent.
    - `draining`: replica actors whose drain call has not finished.
    - `proxy_calls`: per proxy id, the outcome of its proxy's last call (absent: in flight).
    - `dead_nodes`, `no_room` (why nothing fits; "" = room), `node`, `cpus`: node facts;
      `other_nodes`: more alive nodes (id -> IP), each with `cpus`.
    - `alive`: replica actors that exist; `started`, `killed`, `applied`: what it was asked.
    - `storage`: when given, `checkpoints_at_start` holds its content at each start.
    - `output`: each replica's own output lines (`replica_output` answers them all at every read;
      a replica stopped as `failed` leaves them as its `last_words`).
    - `stagings`: what each starting replica says it is fetching (`staging`; none when absent).
    - `queued`: starting replicas whose process Ray has not started yet (`came_up` is False).
    """

    starts: dict[str, Probe] = field(default_factory=dict)
    health: dict[str, Probe] = field(default_factory=dict)
    draining: set[str] = field(default_factory=set)
    proxy_calls: dict[str, Probe] = field(default_factory=dict)
    dead_nodes: set[str] = field(default_factory=set)
    no_room: str = ""
    node: str = "node-1"
    other_nodes: dict[str, str] = field(default_factory=dict)
    cpus: int = 1
    start_error: str = ""
    storage: Storage | None = None
    alive: set[str] = field(default_factory=set)
    started: list[str] = field(default_factory=list)
    killed: list[str] = field(default_factory=list)
    applied: list[Effect | ProxyEffect] = field(default_factory=list)
    checkpoints_at_start: list[bytes | None] = field(default_factory=list)
    output: dict[str, tuple[str, ...]] = field(default_factory=dict)
    stagings: dict[str, tuple[ModelStaging, ...]] = field(default_factory=dict)
    queued: set[str] = field(default_factory=set)  # replica actors whose process Ray has not started yet
    last: dict[str, ReplicaOutput] = field(default_factory=dict)  # by actor name: read at a `failed` stop

    # --- Observer ---------------------------------------------------------------

    def start_probe(self, actor_name: str) -> Probe:
        return self.starts.get(actor_name, Probe(ProbeStatus.PENDING))

    def came_up(self, actor_name: str) -> bool:
        return actor_name not in self.queued

    def health_probe(self, actor_name: str) -> Probe | None:
        return self.health.pop(actor_name, OK)

    def drained(self, actor_name: str) -> bool:
        return actor_name not in self.draining

    def node_of(self, actor_name: str) -> str:
        return self.node

    def staging(self, actor_name: str) -> tuple[ModelStaging, ...]:
        return self.stagings.get(actor_name, ())

    def node_alive(self, node_id: str) -> bool:
        return node_id not in self.dead_nodes

    def cannot_fit(self, config: BackendConfig, count: int) -> str:
        return self.no_room

    # --- the rest of ClusterAdapter --------------------------------------------

    def apply(self, effects: Sequence[Effect | ProxyEffect]) -> None:
        for effect in effects:
            self.applied.append(effect)
            if isinstance(effect, StartReplica):
                self._start(effect.actor_name)
            elif isinstance(effect, (StopReplica, KillReplica)):
                if isinstance(effect, StopReplica) and effect.failed and effect.actor_name in self.alive:
                    replica_id = effect.actor_name.removeprefix(REPLICA_PREFIX)
                    self.last[effect.actor_name] = ReplicaOutput(
                        replica_id=replica_id, out=self.output.get(replica_id, ()))
                self.alive.discard(effect.actor_name)
                if isinstance(effect, KillReplica):
                    self.killed.append(effect.actor_name)

    def _start(self, actor_name: str) -> None:
        if self.storage is not None:
            self.checkpoints_at_start.append(self.storage.get())
        self.started.append(actor_name)
        if self.start_error:
            self.starts[actor_name] = Probe(ProbeStatus.FAILED, self.start_error)
            return
        self.starts[actor_name] = OK
        self.alive.add(actor_name)

    def refresh_nodes(self) -> dict[str, str]:
        nodes = {self.node: "127.0.0.1", **self.other_nodes}
        return {node: ip for node, ip in nodes.items() if node not in self.dead_nodes}

    def proxy_probes(self) -> dict[str, Probe]:
        return dict(self.proxy_calls)

    def node_cpus(self) -> dict[str, int]:
        return {node: self.cpus for node in (self.node, *self.other_nodes)}

    def node_resources(self) -> dict[str, NodeResources]:
        return {node: NodeResources(total={"CPU": float(self.cpus)}, available={"CPU": float(self.cpus)})
                for node in (self.node, *self.other_nodes)}

    def adopt(self, actor_names: set[str]) -> set[str]:
        return actor_names & self.alive

    def sweep_leaks(self, known: set[str]) -> list[str]:
        leaked = sorted(self.alive - known)
        self.alive -= set(leaked)
        return leaked

    def handle(self, actor_name: str) -> object:
        return None

    def begin_proxy_shutdown(self) -> list[Awaitable[None]]:
        return []

    def begin_replica_drain(self, timeout_s: float) -> list[Awaitable[None]]:
        return []

    def stop_everything(self, replica_names: set[str]) -> None:
        self.alive.clear()

    def last_words(self, actor_name: str) -> ReplicaOutput | None:
        return self.last.get(actor_name)

    async def replica_output(
        self, replicas: Sequence[tuple[str, str, OutputCursor | None]], since: float | None,
    ) -> list[ReplicaOutput]:
        return [ReplicaOutput(replica_id=replica_id, out=self.output.get(replica_id, ()))
                for replica_id, _, _ in replicas]
