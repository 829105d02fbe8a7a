"""Who owns a controller: the owner record an agent claims it with.

One agent reconciles a Ray namespace. `Owner` is the record the agent hands
the controller (`controller.client.ControllerClient.claim`) and the
controller keeps in its checkpoint — repository (redacted by the agent),
branch, spec path, agent id, host, pid, start time; `controller.state.ownership`
decides whether a claim is granted. Values only.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Owner"]


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
