"""What the controller's checkpoint holds, as one value: the machines and three facts.

Owns the set of state that crosses a controller restart (backends,
endpoints, goals, rollouts, the owning agent, how many starts found a
checkpoint, the Prometheus the agent named) and its JSON body, read and
written in one place. The envelope and the storage are
`controller.persistence`'s; what is not here (secrets, load reports, the
last minute's requests) a restarted controller learns again. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controller.state.backend_state import BackendOptions, BackendState
from controller.state.endpoint_state import EndpointState
from controller.state.goals import GoalTable
from controller.state.rollout_state import RolloutState
from vocabulary.control.ownership import Owner

__all__ = ["Checkpointed"]


@dataclass
class Checkpointed:
    backends: BackendState
    endpoints: EndpointState
    goals: GoalTable
    rollouts: RolloutState
    owner: Owner | None = None
    restarts: int = 0  # starts that found a checkpoint, this one included
    prometheus_url: str | None = None  # where rollouts' PromQL checks are asked

    @classmethod
    def fresh(cls, options: BackendOptions, prometheus_url: str | None) -> Checkpointed:
        return cls(BackendState(options), EndpointState(), GoalTable(), RolloutState(), prometheus_url=prometheus_url)

    @classmethod
    def from_json(cls, body: dict[str, Any], options: BackendOptions, prometheus_url: str | None) -> Checkpointed:
        """The state a checkpoint body holds, at one more restart; its Prometheus URL wins over `prometheus_url`."""
        return cls(
            backends=BackendState.from_json(body["backends"], options),
            endpoints=EndpointState.from_json(body["endpoints"]),
            goals=GoalTable.from_json(body["goals"]),
            rollouts=RolloutState.from_json(body.get("rollouts")),
            owner=Owner.from_json(body["owner"]) if body.get("owner") else None,
            restarts=int(body.get("restarts", 0)) + 1,
            prometheus_url=body.get("prometheus_url", prometheus_url),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "backends": self.backends.to_json(),
            "endpoints": self.endpoints.to_json(),
            "goals": self.goals.to_json(),
            "owner": self.owner.to_json() if self.owner else None,
            "rollouts": self.rollouts.to_json(),
            "restarts": self.restarts,
            "prometheus_url": self.prometheus_url,
        }
