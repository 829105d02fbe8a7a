"""The proxy fleet: `workers` proxy processes per alive node, as a pure state machine.

Each node runs `ProxySpec.workers` proxies (0: as many as the node has CPUs,
at most `vocabulary.control.proxy_workers.DEFAULT_WORKERS_CAP`), all listening on the same port with
SO_REUSEPORT so the kernel spreads new connections over them. Each worker
is a proxy of its own everywhere the controller keys one: by its proxy id
(`proxy_id`: the node id for worker 0, "node:worker" for the others, so a
one-worker fleet keeps the ids, actor names and status rows of one proxy per
node). Its long poll, load reports, status row and restart count are its own.

Owns, per worker: the proxy's `ProxyState` (STARTING until its first ready
call answers, RUNNING while its pings answer, BACKOFF after a failure until
the next try), its consecutive failures, when it may be tried again, and its
last error, and the address the proxy is reached at (the node's IP for a
proxy bound to every interface, else the address it is bound to, with the
port its ready call answered, or the configured one until then). `tick`
reads the alive nodes with their IPs and the outcome of each proxy's last
ready/ping call (`Probe`s the adapter reports, by proxy id) and each node's
CPU count, and returns the effects
to carry out: `StartProxy`, `StopProxy`, `PingProxy`.

It never touches Ray and never reads a clock: the controller passes `now`,
the adapter carries the effects out. A proxy that cannot start (a port
taken) is retried with exponential backoff rather than crash-looped.

It also counts restarts, per worker: a ping answered by another process than
the last one (Ray restarted the proxy in place, or the fleet replaced it) is
one, and yields `ProxyRestarted` for the adapter to log. A worker that dies
is replaced on its own; the node's other workers keep serving meanwhile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from controller.state.backend_state import Probe, ProbeStatus
from vocabulary.control.goal_api import proxy_id
from vocabulary.control.proxy_workers import DEFAULT_MAX_CONNECTIONS, DEFAULT_WORKERS_CAP, MAX_PROXY_WORKERS, NODE_IP
from vocabulary.control.status import ProxyState, ProxyStatus

__all__ = [
    "PROXY_PREFIX",
    "proxy_actor_name",
    "proxy_id",
    "workers_on",
    "ProxySpec",
    "StartProxy",
    "StopProxy",
    "PingProxy",
    "ProxyRestarted",
    "ProxyEffect",
    "ProxyFleet",
    "proxy_address",
]

PROXY_PREFIX = "gitops-proxy-"


def proxy_actor_name(node_id: str, worker: int = 0) -> str:
    return PROXY_PREFIX + (node_id if worker == 0 else f"{node_id}-{worker}")


def workers_on(wanted: int, cpus: int | None) -> int:
    """Workers a node runs: `wanted` (1..MAX_PROXY_WORKERS), or for 0 its CPUs, at most DEFAULT_WORKERS_CAP
    (1 when unknown)."""
    if wanted > 0:
        return min(wanted, MAX_PROXY_WORKERS)
    return max(1, min(cpus or 1, DEFAULT_WORKERS_CAP))


def proxy_address(host: str, port: int, node_ip: str) -> str:
    """"host:port" a proxy bound to `host` on the node at `node_ip` is reached at."""
    reachable = node_ip if host in ("0.0.0.0", "", "::") else host
    return f"[{reachable}]:{port}" if ":" in reachable else f"{reachable}:{port}"


@dataclass(frozen=True)
class ProxySpec:
    """How every node's proxies are started."""

    proxy_class: str  # "module:Class"
    controller_name: str
    host: str
    port: int
    metrics_port: int | None = None
    workers: int = 1  # per node; 0: the node's CPUs, at most DEFAULT_WORKERS_CAP
    max_connections: int = DEFAULT_MAX_CONNECTIONS  # open connections per worker
    grpc_port: int | None = None  # the gRPC port on the same host (None: no gRPC)

    def listen_host(self, node_ip: str) -> str:
        """The address a proxy on the node at `node_ip` binds: that address itself for `NODE_IP`."""
        return node_ip if self.host == NODE_IP else self.host


class _Worker:
    node_id: str
    worker: int

    @property
    def proxy_id(self) -> str:
        return proxy_id(self.node_id, self.worker)

    @property
    def actor_name(self) -> str:
        return proxy_actor_name(self.node_id, self.worker)


@dataclass(frozen=True)
class StartProxy(_Worker):
    node_id: str
    spec: ProxySpec
    worker: int = 0
    node_ip: str = ""  # the node's address as Ray knows it (what `--proxy-host node-ip` binds)


@dataclass(frozen=True)
class StopProxy(_Worker):
    node_id: str
    error: str = ""  # why its proxy failed; "" when the node went away (or needs fewer workers)
    worker: int = 0


@dataclass(frozen=True)
class PingProxy(_Worker):
    """Ask a running proxy whether it still serves; its answer is the worker's next probe."""

    node_id: str
    worker: int = 0


@dataclass(frozen=True)
class ProxyRestarted(_Worker):
    """The worker answers from a new process: nothing to do but say so."""

    node_id: str
    restarts: int
    previous: int  # the process that answered before
    current: int
    worker: int = 0


ProxyEffect = StartProxy | StopProxy | PingProxy | ProxyRestarted


@dataclass
class _Proxy:
    node_id: str
    worker: int
    state: ProxyState
    ip: str = ""  # the node's, as Ray reports it
    port: int | None = None  # the one its ready call answered
    failures: int = 0
    retry_at: float = 0.0
    last_error: str = ""
    last_ping: float = -math.inf  # never: a proxy is pinged as soon as it is ready
    incarnation: int | None = None  # the process that last answered a ping
    restarts: int = 0


class ProxyFleet:
    """`spec` None: this controller runs no proxies (tests of the goal API)."""

    def __init__(
        self, spec: ProxySpec | None, ping_period_s: float = 2.0,
        backoff_base_s: float = 0.5, backoff_max_s: float = 30.0,
    ) -> None:
        self.spec = spec
        self.ping_period_s = ping_period_s
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self._proxies: dict[str, _Proxy] = {}  # by proxy id

    def tick(
        self, now: float, alive_nodes: Mapping[str, str], probes: Mapping[str, Probe],
        cpus: Mapping[str, int] | None = None,
    ) -> list[ProxyEffect]:
        """`workers` proxies per alive node: start missing, replace failed, drop removed.

        `alive_nodes`: node id -> the node's IP. `probes`: per proxy id, the outcome of its last ready or ping
        call; a proxy missing from it has a call still in flight. `cpus`: node id -> its CPUs, read when
        `spec.workers` is 0.
        """
        if self.spec is None:
            return []
        wanted = {
            proxy_id(node_id, worker): (node_id, worker)
            for node_id in alive_nodes
            for worker in range(workers_on(self.spec.workers, (cpus or {}).get(node_id)))
        }
        effects: list[ProxyEffect] = []
        for key in [k for k in self._proxies if k not in wanted]:
            gone = self._proxies.pop(key)
            if gone.state is not ProxyState.BACKOFF:
                effects.append(StopProxy(gone.node_id, worker=gone.worker))
        for key, (node_id, worker) in wanted.items():
            proxy = self._proxies.setdefault(key, _Proxy(node_id, worker, ProxyState.BACKOFF))
            proxy.ip = alive_nodes[node_id]
            effects.extend(self._step(proxy, now, probes.get(key), self.spec))
        return effects

    def _step(self, proxy: _Proxy, now: float, probe: Probe | None, spec: ProxySpec) -> list[ProxyEffect]:
        node_id, worker = proxy.node_id, proxy.worker
        if proxy.state is ProxyState.BACKOFF:
            if now < proxy.retry_at:
                return []
            proxy.state, proxy.last_ping, proxy.port = ProxyState.STARTING, -math.inf, None
            return [StartProxy(node_id, spec, worker, proxy.ip)]
        if probe is None or probe.status is ProbeStatus.PENDING:
            return []
        if probe.status is not ProbeStatus.OK:
            proxy.failures += 1
            proxy.retry_at = now + min(self.backoff_base_s * 2 ** (proxy.failures - 1), self.backoff_max_s)
            proxy.last_error = probe.error
            proxy.state = ProxyState.BACKOFF
            return [StopProxy(node_id, probe.error, worker)]
        proxy.state, proxy.failures = ProxyState.RUNNING, 0
        proxy.port = probe.port if probe.port is not None else proxy.port
        effects: list[ProxyEffect] = self._restarted(proxy, probe.incarnation)
        if now - proxy.last_ping < self.ping_period_s:
            return effects
        proxy.last_ping = now
        return [*effects, PingProxy(node_id, worker)]

    @staticmethod
    def _restarted(proxy: _Proxy, incarnation: int | None) -> list[ProxyEffect]:
        previous = proxy.incarnation
        if incarnation is None or incarnation == previous:
            return []
        proxy.incarnation = incarnation
        if previous is None:
            return []
        proxy.restarts += 1
        return [ProxyRestarted(proxy.node_id, proxy.restarts, previous, incarnation, proxy.worker)]

    # --- reads ------------------------------------------------------------------

    def serving(self) -> list[str]:
        """Proxy ids of the workers that answer."""
        return [k for k, proxy in self._proxies.items() if proxy.state is ProxyState.RUNNING]

    def live(self) -> list[str]:
        """Proxy ids that goals wait for: starting ones too, so a goal met means
        every worker holds the change, not just the ones up so far."""
        live = (ProxyState.STARTING, ProxyState.RUNNING)
        return [k for k, proxy in self._proxies.items() if proxy.state in live]

    def _address(self, proxy: _Proxy) -> str:
        """"" while it is unknown: any free port (0) asked for, and no ready answer yet."""
        if self.spec is None:
            return ""
        port = proxy.port if proxy.port is not None else self.spec.port
        return proxy_address(self.spec.listen_host(proxy.ip), port, proxy.ip) if port else ""

    def proxy_status(self) -> dict[str, ProxyStatus]:
        """Every alive node's workers, by proxy id; a worker waiting out a failed start shows BACKOFF."""
        return {
            key: ProxyStatus(
                actor_name=proxy_actor_name(proxy.node_id, proxy.worker), state=proxy.state,
                failures=proxy.failures, last_error=proxy.last_error, restarts=proxy.restarts,
                address=self._address(proxy), worker=proxy.worker,
            )
            for key, proxy in sorted(self._proxies.items(), key=lambda item: (item[1].node_id, item[1].worker))
        }
