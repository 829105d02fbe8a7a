"""How many proxy workers a node may run, and how many connections each may
hold: the bounds of `--proxy-workers` and `--proxy-max-connections`; and
`NODE_IP`, the `--proxy-host` that names no one address.

The agent checks its flag against them (`gitops.cli`, `gitops.commands.run`)
and the controller's fleet applies them (`controller.state.proxy_fleet.workers_on`),
so they live here, where both meet. Values only.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_WORKERS_CAP", "MAX_PROXY_WORKERS", "DEFAULT_MAX_CONNECTIONS", "MAX_CONNECTIONS_CEILING", "NODE_IP",
]

# Proxy workers per node when not told. One worker saturates about one core
# (the HTTP parsing and replica calls of a request run on its one event
# loop), and the replicas, Raylet and GCS need cores of the node too: past
# four, more workers buy little unless the node is mostly proxy, and each
# costs ~100 MB of memory, a long poll and a load report stream to the
# controller. A node that is mostly proxy is told more (`--proxy-workers`).
DEFAULT_WORKERS_CAP = 4
# The most a node may be told to run: a bound on a flag, not advice.
MAX_PROXY_WORKERS = 32

# Open connections each worker holds; past it, a new one is answered 503 with
# Retry-After (`httpedge.limits.EdgeLimits.max_connections`, the same default).
# Each costs a file descriptor and a few KiB of buffers, so the default is
# safe on a small node; thousands of long-lived streams need it raised.
DEFAULT_MAX_CONNECTIONS = 4096
# The most the flag takes: beyond it a worker's file descriptors and memory,
# not this bound, would refuse connections.
MAX_CONNECTIONS_CEILING = 1_000_000

# `--proxy-host node-ip`: each node's proxies listen on the address Ray knows
# that node by (`ray start --node-ip-address`), not on every interface: the
# cluster's network only, on nodes that have others. The controller's fleet
# starts each node's proxies on that address and dials them there
# (`controller.state.proxy_fleet`).
NODE_IP = "node-ip"
