"""Which agent owns a controller (one agent per Ray namespace). Pure.

Owns the owner record the controller keeps in its checkpoint — repository
(redacted by the agent), branch, spec path, agent id, host, pid, start time
— and the decision `claim` makes: a controller with no owner, or owned by
the same agent id (the same agent restarted: its id lives in its state
dir), is granted; another agent's is refused unless it takes over. Two
agents reconciling one namespace would delete each other's backends every
tick. Must not: do I/O.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Owner", "claim"]


@dataclass(frozen=True)
class Owner:
    agent_id: str
    repo: str
    branch: str
    path: str
    host: str
    pid: int
    started_at: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Owner:
        return cls(**data)

    def describe(self) -> str:
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started_at))
        return (
            f"agent {self.agent_id} (pid {self.pid} on {self.host}, watching {self.repo} "
            f"branch {self.branch} path {self.path}, since {since})"
        )


def claim(current: Owner | None, candidate: Owner, take_over: bool) -> Owner | None:
    """The owner that keeps the controller from `candidate`, or None if it is granted."""
    if current is None or current.agent_id == candidate.agent_id or take_over:
        return None
    return current
