"""The agent's handle on the controller: `GoalAPI` over Ray calls.

Owns finding or starting the named, detached controller actor
(`start_or_connect`, which first checks that a stored checkpoint is one this
controller can read, so an unreadable one is a clear `CheckpointError`
rather than an actor that dies at start), forwarding each `GoalAPI` call to
it, turning Ray's wrapped errors back into the plain `ValueError` the
controller raised, `shutdown`, which stops the controller, its proxies and
its replicas, `discard_checkpoint`, the documented reset, the owning
agent's record (`claim`, `owner`, `release` of a `vocabulary.control.ownership.Owner`;
see `controller.state.ownership`), its settings that outlive a controller start
(`set_prometheus_url`), and asking a proxy worker for its node's shadow
mismatches over Ray (`proxy_mismatches`: the sample is never on a proxy's
public port). Calls go through the typed handle (`vocabulary.control.actor_apis.Remote`
over `ControllerAPI`); `result` waits for one such call in a plain thread;
`replica_output` reads every replica's own output for `gitops logs`.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Concatenate, ParamSpec, TypeVar, cast

import ray
from ray import ObjectRef
from ray.actor import ActorHandle
from ray.exceptions import RayError, RayTaskError

from controller.actor import ControllerActor
from controller.persistence.checkpoint import CheckpointError, decode
from vocabulary.control.ownership import Owner
from controller.persistence.ray_kv import RayKVStorage
from vocabulary.control.actor_apis import ControllerAPI, ProxyAPI, Remote
from vocabulary.control.goal_api import CONTROLLER_NAME, DEFAULT_NAMESPACE
from vocabulary.control.goals import GoalResult
from vocabulary.spec.backends import BackendConfig
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.state import ServingState
from vocabulary.replicas.replica_output import OutputCursor, ReplicaOutput
from vocabulary.control.request_stats import RequestStats
from vocabulary.control.status import ClusterStatus

_HEAD_NODE_RESOURCE = "node:__internal_head__"

# CheckpointError is what start_or_connect raises: the agent catches it from here.
__all__ = ["ControllerClient", "CheckpointError", "connect", "start_or_connect", "discard_checkpoint", "result"]

P = ParamSpec("P")
R = TypeVar("R")


class ControllerClient:
    """Implements `vocabulary.control.goal_api.GoalAPI` by forwarding to the controller actor."""

    def __init__(self, handle: ActorHandle[Any], namespace: str) -> None:
        self.handle = handle
        self.controller: Remote[ControllerAPI] = Remote(handle)
        self.namespace = namespace

    async def _call(
        self, method: Callable[Concatenate[ControllerAPI, P], Awaitable[R]], *args: P.args, **kwargs: P.kwargs
    ) -> R:
        try:
            return await self.controller.call(method, *args, **kwargs)
        except RayTaskError as err:
            cause = getattr(err, "cause", None)
            if isinstance(cause, ValueError):
                raise ValueError(str(cause)) from None
            raise

    async def apply_backend(self, config: BackendConfig) -> str:
        return await self._call(ControllerAPI.apply_backend, config)

    async def delete_backend(self, name: str) -> str:
        return await self._call(ControllerAPI.delete_backend, name)

    async def apply_endpoint(self, config: EndpointConfig) -> str:
        return await self._call(ControllerAPI.apply_endpoint, config)

    async def delete_endpoint(self, name: str) -> str:
        return await self._call(ControllerAPI.delete_endpoint, name)

    async def wait_for_goal(self, goal_id: str, timeout_s: float) -> GoalResult:
        return await self._call(ControllerAPI.wait_for_goal, goal_id, timeout_s)

    async def get_state(self) -> ServingState:
        return await self._call(ControllerAPI.get_state)

    async def get_status(self) -> ClusterStatus:
        return await self._call(ControllerAPI.get_status)

    async def secrets_recipient(self) -> str:
        return await self._call(ControllerAPI.secrets_recipient)

    async def put_secrets(self, sealed: bytes) -> list[str]:
        return await self._call(ControllerAPI.put_secrets, sealed)

    async def secrets_missing(self) -> list[str]:
        return await self._call(ControllerAPI.secrets_missing)

    async def endpoint_totals(self) -> dict[str, RequestStats]:
        """Each endpoint's answers, 5xx and shadow comparisons, cumulative since the proxies
        started, as they reported them to the controller (what promotions are judged on)."""
        return await self._call(ControllerAPI.endpoint_totals)

    async def report_load(self, proxy_id: str, loads: dict[str, tuple[int, int]]) -> None:
        await self._call(ControllerAPI.report_load, proxy_id, loads)

    async def replica_output(
        self, backend: str, since: float | None = None, cursors: dict[str, OutputCursor] | None = None
    ) -> list[ReplicaOutput]:
        """Every replica's own stdout and stderr lines (for `gitops logs`); ValueError for an unknown backend."""
        return await self._call(ControllerAPI.replica_output, backend, since, cursors)

    async def set_target_replicas(self, backend: str, target: int) -> None:
        await self._call(ControllerAPI.set_target_replicas, backend, target)

    async def decide_rollout(self, endpoint: str, verb: str, who: str) -> str:
        """Promote or abort a running rollout by hand; ValueError saying why not."""
        return await self._call(ControllerAPI.decide_rollout, endpoint, verb, who)

    async def proxy_mismatches(self, actor_name: str) -> list[dict[str, Any]] | str:
        """The shadow mismatches of the proxy worker `actor_name`'s node, or why it gave none."""
        try:
            proxy: Remote[ProxyAPI] = Remote(ray.get_actor(actor_name, namespace=self.namespace))
            sample = await proxy.call(ProxyAPI.shadow_mismatches)
        except ValueError:
            return "unreachable (no such proxy)"
        except RayError as error:
            return f"unreachable ({type(error).__name__})"
        return sample

    def claim(self, owner: Owner, take_over: bool = False) -> Owner | None:
        """Make `owner` the controller's agent; the other agent's record if refused."""
        holder = result(self.controller.call(ControllerAPI.claim, owner.to_json(), take_over))
        return Owner.from_json(holder) if holder else None

    def owner(self) -> Owner | None:
        record = result(self.controller.call(ControllerAPI.owner))
        return Owner.from_json(record) if record else None

    def release(self, agent_id: str) -> None:
        result(self.controller.call(ControllerAPI.release, agent_id))

    def set_prometheus_url(self, url: str | None) -> None:
        """Where rollouts' PromQL checks are asked from now on (None: nowhere)."""
        result(self.controller.call(ControllerAPI.set_prometheus_url, url))

    def shutdown(self) -> None:
        """Stop proxies, replicas and the controller, and forget its checkpoint."""
        try:
            result(self.controller.call(ControllerAPI.shutdown_all))
        finally:
            ray.kill(self.handle, no_restart=True)


def connect(namespace: str = DEFAULT_NAMESPACE) -> ControllerClient:
    """The controller already running in `namespace`; never starts one.

    Needs a connected Ray. Raises LookupError when no controller runs there
    (read-only callers such as `gitops plan --live` must not create one).
    """
    try:
        handle = ray.get_actor(CONTROLLER_NAME, namespace=namespace)
    except ValueError:
        raise LookupError(f"no gitops controller is running in Ray namespace '{namespace}'") from None
    return ControllerClient(handle, namespace)


def start_or_connect(
    namespace: str = DEFAULT_NAMESPACE,
    proxy_host: str = "127.0.0.1",
    proxy_port: int = 8000,
    options: dict[str, Any] | None = None,
) -> ControllerClient:
    """Find the named detached controller in `namespace`, or start it.

    Needs a connected Ray (`controller.cluster.init_ray`). `options` is the
    flat dict `controller.loop.ControllerOptions.from_dict` takes; it only
    applies when the controller is started here (settings an agent changes
    on a running controller have their own calls, e.g. `set_prometheus_url`).
    """
    if not ray.is_initialized():
        from controller.cluster import init_ray

        init_ray(namespace=namespace)
    if not _running(namespace):
        _check_checkpoint(namespace)
    settings = {"proxy_host": proxy_host, "proxy_port": proxy_port, **(options or {})}
    handle = ray.remote(ControllerActor).options(
        name=CONTROLLER_NAME,
        namespace=namespace,
        lifetime="detached",
        get_if_exists=True,
        num_cpus=0,
        # On the head node: it lives as long as the cluster, so losing a
        # worker node never takes the control plane with it.
        resources={_HEAD_NODE_RESOURCE: 0.001},
        # Restarts rebuild from the checkpoint; every call is idempotent, so
        # retrying one that was in flight when the controller died is safe.
        max_restarts=-1,
        max_task_retries=-1,
        max_concurrency=10_000,
    ).remote(namespace, settings)
    # Ray types what `.remote()` starts as "a handle or the class itself"; it is a handle.
    assert isinstance(handle, ActorHandle), handle
    client = ControllerClient(handle, namespace)
    result(client.controller.call(ControllerAPI.ping), timeout_s=120)
    return client


def result(ref: Awaitable[R], timeout_s: float = 60) -> R:
    """The result of a typed handle's call (`vocabulary.control.actor_apis.Remote`), waited for in this thread."""
    return ray.get(cast("ObjectRef[R]", ref), timeout=timeout_s)  # what `Remote.call` returns is Ray's ObjectRef


def discard_checkpoint(namespace: str = DEFAULT_NAMESPACE) -> bool:
    """Forget the stored controller state; returns whether there was one.

    The reset for a checkpoint this controller cannot read. Refuses (with
    RuntimeError) while a controller runs: it would write its state again.
    """
    if _running(namespace):
        raise RuntimeError(f"a gitops controller is running in Ray namespace '{namespace}'; stop its agent first")
    storage = RayKVStorage(namespace)
    existed = storage.get() is not None
    storage.delete()
    return existed


def _running(namespace: str) -> bool:
    try:
        ray.get_actor(CONTROLLER_NAME, namespace=namespace)
    except ValueError:
        return False
    return True


def _check_checkpoint(namespace: str) -> None:
    """Raises `CheckpointError` (readable, naming the reset) for a checkpoint this controller cannot read."""
    data = RayKVStorage(namespace).get()
    if data is not None:
        decode(data)
