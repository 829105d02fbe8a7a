"""The controller's goal API, as its clients see it.

`GoalAPI` is the contract between the agent (and any other client) and the
controller actor: `controller.actor.ControllerActor` implements it as Ray
actor methods, `controller.client.ControllerClient` forwards to the actor,
and tests of the agent pass in `gitops.testing.FakeController`, which
implements the same protocol.

Rules every implementation keeps:
- Every state-changing call is idempotent and returns a goal id. An
  identical repeated call changes nothing and returns a goal that is met.
- A goal is a predicate over observed state, re-checked every control-loop
  tick, so it survives a controller restart.
- Invalid requests (unknown backend in traffic, weights not summing to 1,
  deleting a backend that still has traffic) raise `ValueError` with a clear
  message and change nothing.

Long-poll keys (see `LongPollKey`) and their payloads:
- `routes` -> `RouteTable`
- `endpoint:<name>` -> `EndpointConfig`, or None once deleted
- `replicas:<backend>` -> `ReplicaSet`, or None once deleted

A proxy subscribes with `listen_for_change(keys_to_snapshot_ids, proxy_id=
proxy_id(node_id, worker))` on the controller actor, and reports its load
under the same id. Passing `proxy_id` (one per proxy worker: a node runs
several) is how the controller knows WHICH proxy acknowledged a snapshot;
without it endpoint goals ("every live proxy has acked") cannot be met for
that proxy.

Where the controller is found: `CONTROLLER_NAME` in a Ray namespace, the one
`--namespace` names, else `$GITOPS_NAMESPACE`, else `DEFAULT_NAMESPACE`
(`namespace_of`, a function of the environment it is given).
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol

from vocabulary.control.goals import GoalResult
from vocabulary.control.longpoll import RouteTable
from vocabulary.spec.backends import BackendConfig
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.state import ServingState
from vocabulary.control.status import ClusterStatus

__all__ = [
    "GoalAPI", "LongPollKey", "CONTROLLER_NAME", "DEFAULT_NAMESPACE", "NAMESPACE_ENV", "PROXY_CLASS", "REPLICA_CLASS",
    "namespace_of", "proxy_id",
]

CONTROLLER_NAME = "gitops-controller"
DEFAULT_NAMESPACE = "ray-gitops"
# The Ray namespace every `gitops` verb that takes --namespace uses when it is not given.
NAMESPACE_ENV = "GITOPS_NAMESPACE"


def namespace_of(given: str | None, environ: Mapping[str, str]) -> str:
    """The Ray namespace a verb works in: --namespace, else $GITOPS_NAMESPACE, else ray-gitops."""
    return given or environ.get(NAMESPACE_ENV) or DEFAULT_NAMESPACE

# The actor classes the controller starts, named here rather than imported so
# that the control plane never imports the data plane or the user-code host.
PROXY_CLASS = "proxy.actor:ProxyActor"
REPLICA_CLASS = "replica.host:Replica"


def proxy_id(node_id: str, worker: int = 0) -> str:
    """One proxy worker's id, wherever the controller keys a proxy: the node id
    for worker 0 (as with one proxy per node), "node:worker" for the others."""
    return node_id if worker == 0 else f"{node_id}:{worker}"


class LongPollKey:
    ROUTES = "routes"

    @staticmethod
    def endpoint(name: str) -> str:
        return f"endpoint:{name}"

    @staticmethod
    def replicas(backend: str) -> str:
        return f"replicas:{backend}"

    @staticmethod
    def implied(payload: Any) -> frozenset[str]:
        """The keys a subscriber needs next once it holds `payload`: a route
        table's endpoints, an endpoint's backends' replica sets."""
        if isinstance(payload, RouteTable):
            return frozenset(LongPollKey.endpoint(entry.endpoint) for entry in payload.entries)
        if isinstance(payload, EndpointConfig):
            return frozenset(LongPollKey.replicas(backend) for backend in payload.backends())
        return frozenset()


class GoalAPI(Protocol):
    async def apply_backend(self, config: BackendConfig) -> str:
        """Create or update a backend; returns a goal id.

        Met when the backend runs `config.version` with its target number of
        RUNNING replicas and none of another version.
        """

    async def delete_backend(self, name: str) -> str:
        """Drain and remove a backend; raises ValueError while an endpoint uses it."""

    async def apply_endpoint(self, config: EndpointConfig) -> str:
        """Create or update an endpoint (route, methods, traffic, shadow, timeout).

        Met when every live proxy has acknowledged the resulting snapshot.
        """

    async def delete_endpoint(self, name: str) -> str:
        """Remove an endpoint; met when every live proxy has acknowledged it."""

    async def wait_for_goal(self, goal_id: str, timeout_s: float) -> GoalResult:
        """Block up to `timeout_s`; returns the goal's state (PENDING on timeout)."""

    async def get_state(self) -> ServingState:
        """The configured state: what the planner diffs against."""

    async def get_status(self) -> ClusterStatus:
        """Observed state for status pages and metrics (`vocabulary.control.status`)."""
