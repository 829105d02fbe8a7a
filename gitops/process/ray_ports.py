"""The embedded Ray's own ports, as `gitops run --ray-port` and `--ray-min/max-worker-port` ask.

Pure: checks the numbers and returns them as one value for
`controller.cluster.init_ray`. Without the flags Ray picks every port at random,
as before. The flags mean Ray's own `ray start --port`, `--min-worker-port` and
`--max-worker-port`: the GCS port (what a node joining this Ray would dial),
and the range each worker process (the controller, the proxies, every
replica) takes its port from. They concern the Ray this agent starts only;
a joined cluster's ports are set by its `ray start`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from gitops.errors import UsageError

__all__ = ["RayPorts", "MIN_WORKER_PORTS", "ray_ports"]

# Each Ray worker process holds one port of the range while it runs; fewer than
# this leaves no room for a controller, proxies and a few replicas.
MIN_WORKER_PORTS = 16
_LOWEST, _HIGHEST = 1024, 65535  # Ray's own bounds (no privileged ports)


@dataclass(frozen=True)
class RayPorts:
    """The ports asked for; None where Ray chooses."""

    gcs: int | None = None
    workers: tuple[int, int] | None = None  # lowest and highest, both included

    @property
    def chosen(self) -> bool:
        return self.gcs is not None or self.workers is not None


def ray_ports(
    port: int | None, min_worker: int | None, max_worker: int | None, *, joined: bool, taken: Mapping[str, int]
) -> RayPorts:
    """The flags' values checked: within 1024..65535, a range of at least
    MIN_WORKER_PORTS, apart from each other and from the agent's own listeners
    (`taken`: flag -> port). A bad value is a usage error naming the flag."""
    asked = [flag for flag, value in (("--ray-port", port), ("--ray-min-worker-port", min_worker),
                                      ("--ray-max-worker-port", max_worker)) if value is not None]
    if not asked:
        return RayPorts()
    if joined:
        raise UsageError(
            f"{asked[0]} sets the ports of the Ray this agent starts: with --ray-address, set them on the "
            "cluster's `ray start` (--port, --min-worker-port, --max-worker-port)"
        )
    for flag, value in (("--ray-port", port), ("--ray-min-worker-port", min_worker),
                        ("--ray-max-worker-port", max_worker)):
        if value is not None and not _LOWEST <= value <= _HIGHEST:
            raise UsageError(f"{flag} must be {_LOWEST} to {_HIGHEST}, not {value}")
    workers = _worker_range(min_worker, max_worker)
    for flag, value in taken.items():
        if port is not None and value == port:
            raise UsageError(f"--ray-port {port} is also {flag}: give each its own port")
        if workers is not None and workers[0] <= value <= workers[1]:
            raise UsageError(
                f"{flag} {value} is inside --ray-min-worker-port..--ray-max-worker-port "
                f"({workers[0]}-{workers[1]}): Ray's workers would take it"
            )
    if port is not None and workers is not None and workers[0] <= port <= workers[1]:
        raise UsageError(
            f"--ray-port {port} is inside --ray-min-worker-port..--ray-max-worker-port ({workers[0]}-{workers[1]})"
        )
    return RayPorts(port, workers)


def _worker_range(low: int | None, high: int | None) -> tuple[int, int] | None:
    if low is None and high is None:
        return None
    if low is None or high is None:
        raise UsageError("--ray-min-worker-port and --ray-max-worker-port go together: give both")
    if high - low + 1 < MIN_WORKER_PORTS:
        raise UsageError(
            f"--ray-min-worker-port {low} to --ray-max-worker-port {high} is {max(high - low + 1, 0)} ports: "
            f"give at least {MIN_WORKER_PORTS} (each Ray worker process, replicas included, holds one)"
        )
    return low, high
