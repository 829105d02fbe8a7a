"""What the agent says about processes that died and came back.

Ray's own messages about a dead worker stay out of the agent's output
(`gitops.process.quieting`); this module turns two successive observations of the
cluster (`ClusterStatus`) into the agent's own lines instead: a replica
replaced (backend, replica id, reason, its error), the controller restarted
from its checkpoint, a node's proxy back as a new process. Replicas that fail
the same way again and again (a wrong model digest, an `__init__` that
raises: every start of every retry fails alike) go through `FailureLog`: the
first of a kind (backend and reason) is said at once, the others of its
interval are counted and said as one line when the interval is over. Pure:
the agent logs what it returns. Must not: decide anything, or repeat an
event already said (each is said once, from the first observation that
shows it, or counted in one summary line).
"""

from __future__ import annotations

from dataclasses import dataclass

from vocabulary.control.status import ClusterStatus, ReplicaFailure

__all__ = ["restart_lines", "new_failures", "FailureLog", "FAILURE_LOG_EVERY_S"]

# One line per failure kind per this many seconds.
FAILURE_LOG_EVERY_S = 60.0


@dataclass
class _Kind:
    said_at: float  # when the last line of this kind was said
    unsaid: int = 0  # failures of this kind since, not said
    latest: ReplicaFailure | None = None


class FailureLog:
    """Replica failures said at most once per kind (backend, reason) every `every_s`
    seconds: the first at once, the others of the interval counted, then said as
    one line when it is over (`lines(…, [])` on every observation says them)."""

    def __init__(self, every_s: float = FAILURE_LOG_EVERY_S) -> None:
        self._every_s = every_s
        self._kinds: dict[tuple[str, str], _Kind] = {}

    def lines(self, failures: list[ReplicaFailure], now: float) -> list[str]:
        said: list[str] = []
        for key, kind in sorted(self._kinds.items()):
            if now - kind.said_at >= self._every_s:
                if kind.unsaid and kind.latest is not None:
                    said.append(_summary(kind.unsaid, kind.latest))
                    self._kinds[key] = _Kind(now)
                else:
                    del self._kinds[key]  # a quiet interval: the next failure is news again
        for failure in failures:
            known = self._kinds.get((failure.backend, failure.reason))
            if known is None:
                self._kinds[(failure.backend, failure.reason)] = _Kind(now)
                said.append(failure.message())
            else:
                known.unsaid += 1
                known.latest = failure
        return said


def _summary(count: int, latest: ReplicaFailure) -> str:
    times = "1 more time" if count == 1 else f"{count} more times"
    return f"{latest.message()} ({times} the same way since the last such line)"


def new_failures(before: ClusterStatus | None, now: ClusterStatus) -> list[ReplicaFailure]:
    """The replica failures `now` shows that `before` did not, oldest first (none when
    the agent just started: earlier ones are history)."""
    if before is None:
        return []
    # Failure serials count again from 1 with each controller start.
    restarted = now.controller_restarts != before.controller_restarts
    seen = 0 if restarted else max((f.serial for f in before.replica_failures), default=0)
    return [f for f in now.replica_failures if f.serial > seen]


def restart_lines(
    before: ClusterStatus | None, now: ClusterStatus, failure_log: FailureLog | None = None, at: float = 0.0,
) -> list[str]:
    """The events `now` shows that `before` did not, oldest first; replica failures
    through `failure_log` (at time `at`) when given, else each said.

    With no `before` (the agent just started) only the controller's restart
    count is news if it is not zero; earlier replica failures are history.
    """
    if before is None:
        lines = [_controller_line(now.controller_restarts)] if now.controller_restarts else []
        return lines + (failure_log.lines([], at) if failure_log is not None else [])
    lines = []
    restarted = now.controller_restarts != before.controller_restarts
    if restarted:
        lines.append(_controller_line(now.controller_restarts))
    failures = new_failures(before, now)
    lines.extend(failure_log.lines(failures, at) if failure_log is not None else [f.message() for f in failures])
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
