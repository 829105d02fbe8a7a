"""The proxy fleet: one proxy per alive node, as a pure state machine.

Owns, per node: the proxy's `ProxyState` (STARTING until its first ready
call answers, RUNNING while its pings answer, BACKOFF after a failure until
the next try), its consecutive failures, when it may be tried again, and its
last error, and the address the proxy is reached at (the node's IP for a
proxy bound to every interface, else the address it is bound to, with the
port its ready call answered, or the configured one until then). `tick`
reads the alive nodes with their IPs and the outcome of each proxy's last
ready/ping call (`Probe`s the adapter reports) and returns the effects
to carry out: `StartProxy`, `StopProxy`, `PingProxy`.

It never touches Ray and never reads a clock: the controller passes `now`,
the adapter carries the effects out. A proxy that cannot start (a port
taken) is retried with exponential backoff rather than crash-looped.

It also counts restarts: a ping answered by another process than the last
one (Ray restarted the proxy in place, or the fleet replaced it) is one, and
yields `ProxyRestarted` for the adapter to log.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from controller.backend_state import Probe, ProbeStatus
from vocabulary.status import ProxyState, ProxyStatus

__all__ = [
    "PROXY_PREFIX",
    "proxy_actor_name",
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


def proxy_actor_name(node_id: str) -> str:
    return PROXY_PREFIX + node_id


def proxy_address(host: str, port: int, node_ip: str) -> str:
    """"host:port" a proxy bound to `host` on the node at `node_ip` is reached at."""
    reachable = node_ip if host in ("0.0.0.0", "", "::") else host
    return f"[{reachable}]:{port}" if ":" in reachable else f"{reachable}:{port}"


@dataclass(frozen=True)
class ProxySpec:
    """How every node's proxy is started."""

    proxy_class: str  # "module:Class"
    controller_name: str
    host: str
    port: int
    metrics_port: int | None = None


@dataclass(frozen=True)
class StartProxy:
    node_id: str
    spec: ProxySpec


@dataclass(frozen=True)
class StopProxy:
    node_id: str
    error: str = ""  # why its proxy failed; "" when the node went away


@dataclass(frozen=True)
class PingProxy:
    """Ask a running proxy whether it still serves; its answer is the node's next probe."""

    node_id: str


@dataclass(frozen=True)
class ProxyRestarted:
    """The node's proxy answers from a new process: nothing to do but say so."""

    node_id: str
    restarts: int
    previous: int  # the process that answered before
    current: int


ProxyEffect = StartProxy | StopProxy | PingProxy | ProxyRestarted


@dataclass
class _Node:
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
        self._nodes: dict[str, _Node] = {}

    def tick(
        self, now: float, alive_nodes: Mapping[str, str], probes: Mapping[str, Probe]
    ) -> list[ProxyEffect]:
        """One proxy per alive node: start missing, replace failed, drop removed.

        `alive_nodes`: node id -> the node's IP. `probes`: per node, the outcome of its proxy's last ready or ping
        call; a node missing from it has a call still in flight.
        """
        if self.spec is None:
            return []
        effects: list[ProxyEffect] = []
        for node_id in [n for n in self._nodes if n not in alive_nodes]:
            if self._nodes.pop(node_id).state is not ProxyState.BACKOFF:
                effects.append(StopProxy(node_id))
        for node_id, ip in alive_nodes.items():
            node = self._nodes.setdefault(node_id, _Node(ProxyState.BACKOFF))
            node.ip = ip
            effects.extend(self._step(node_id, node, now, probes.get(node_id), self.spec))
        return effects

    def _step(
        self, node_id: str, node: _Node, now: float, probe: Probe | None, spec: ProxySpec
    ) -> list[ProxyEffect]:
        if node.state is ProxyState.BACKOFF:
            if now < node.retry_at:
                return []
            node.state, node.last_ping, node.port = ProxyState.STARTING, -math.inf, None
            return [StartProxy(node_id, spec)]
        if probe is None or probe.status is ProbeStatus.PENDING:
            return []
        if probe.status is not ProbeStatus.OK:
            node.failures += 1
            node.retry_at = now + min(self.backoff_base_s * 2 ** (node.failures - 1), self.backoff_max_s)
            node.last_error = probe.error
            node.state = ProxyState.BACKOFF
            return [StopProxy(node_id, probe.error)]
        node.state, node.failures = ProxyState.RUNNING, 0
        node.port = probe.port if probe.port is not None else node.port
        effects: list[ProxyEffect] = self._restarted(node_id, node, probe.incarnation)
        if now - node.last_ping < self.ping_period_s:
            return effects
        node.last_ping = now
        return [*effects, PingProxy(node_id)]

    @staticmethod
    def _restarted(node_id: str, node: _Node, incarnation: int | None) -> list[ProxyEffect]:
        previous = node.incarnation
        if incarnation is None or incarnation == previous:
            return []
        node.incarnation = incarnation
        if previous is None:
            return []
        node.restarts += 1
        return [ProxyRestarted(node_id, node.restarts, previous, incarnation)]

    # --- reads ------------------------------------------------------------------

    def serving(self) -> list[str]:
        """Nodes whose proxy answers."""
        return [n for n, node in self._nodes.items() if node.state is ProxyState.RUNNING]

    def live(self) -> list[str]:
        """Proxies that goals wait for: starting ones too, so a goal met means
        every node's proxy holds the change, not just the ones up so far."""
        live = (ProxyState.STARTING, ProxyState.RUNNING)
        return [n for n, node in self._nodes.items() if node.state in live]

    def _address(self, node: _Node) -> str:
        """"" while it is unknown: any free port (0) asked for, and no ready answer yet."""
        if self.spec is None:
            return ""
        port = node.port if node.port is not None else self.spec.port
        return proxy_address(self.spec.host, port, node.ip) if port else ""

    def proxy_status(self) -> dict[str, ProxyStatus]:
        """Every alive node's proxy; a node waiting out a failed start shows BACKOFF."""
        return {
            node_id: ProxyStatus(
                actor_name=proxy_actor_name(node_id), state=node.state,
                failures=node.failures, last_error=node.last_error, restarts=node.restarts,
                address=self._address(node),
            )
            for node_id, node in sorted(self._nodes.items())
        }
