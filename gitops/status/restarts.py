"""What the agent says about processes that died and came back.

Ray's own messages about a dead worker stay out of the agent's output
(`gitops.process.quieting`); this module turns two successive observations of the
cluster (`ClusterStatus`) into the agent's own lines instead: a replica
replaced (backend, replica id, reason, its error), the controller restarted
from its checkpoint, a node's proxy back as a new process. Pure: the agent
logs what it returns. Must not: decide anything, or repeat an event already
said (each is said once, from the first observation that shows it).
"""

from __future__ import annotations

from vocabulary.control.status import ClusterStatus

__all__ = ["restart_lines"]


def restart_lines(before: ClusterStatus | None, now: ClusterStatus) -> list[str]:
    """The events `now` shows that `before` did not, oldest first.

    With no `before` (the agent just started) only the controller's restart
    count is news if it is not zero; earlier replica failures are history.
    """
    if before is None:
        return [_controller_line(now.controller_restarts)] if now.controller_restarts else []
    lines: list[str] = []
    restarted = now.controller_restarts != before.controller_restarts
    if restarted:
        lines.append(_controller_line(now.controller_restarts))
    # Failure serials count again from 1 with each controller start.
    seen = 0 if restarted else max((f.serial for f in before.replica_failures), default=0)
    lines.extend(f.message() for f in now.replica_failures if f.serial > seen)
    for node, proxy in sorted(now.proxies.items()):
        earlier = before.proxies.get(node)
        counted = earlier.restarts if earlier is not None and not restarted else 0
        if proxy.restarts > counted:
            node_id, _, worker = node.partition(":")
            which = f"proxy worker {worker} on node {node_id}" if worker else f"proxy on node {node_id}"
            lines.append(f"{which} restarted as a new process (restart {proxy.restarts})")
    return lines


def _controller_line(restarts: int) -> str:
    return f"controller restarted and recovered its checkpoint (restart {restarts})"
