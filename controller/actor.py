"""The controller actor: the Ray façade over the control loop and its rooms.

Owns the Ray-facing methods of `vocabulary.control.goal_api.GoalAPI` plus
`listen_for_change`, load reports, status, secrets and the lifecycle hooks,
grouped below by the room each delegates to; and wiring those rooms
together at start. What a call changes, and in which order it is
checkpointed and carried out, is `controller.loop`'s (the loop, recovery,
the options and the adapter protocol); the secrets are
`controller.state.secrets`'; the long poll is `controller.state.longpoll`'s.

Runs as one detached, named Ray actor (see `controller.client`); it holds no
state that the checkpoint and a look at live actors cannot rebuild. Ray
itself is reached only through the adapter and storage, which default to
`controller.shell.ray_adapter` and `controller.persistence.ray_kv`, imported
when first built, so this module loads without Ray (tests pass
`controller.testing` fakes). Started by Ray, it turns core dumps off for
its process first (`hardening.core_dumps`): it holds the secret values it
seals for replicas.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from controller.loop import Asker, ClusterAdapter, ControlLoop, ControllerOptions
from controller.persistence.checkpoint import Checkpointer, Storage
from controller.state.secrets import SecretKeeper
from hardening.core_dumps import no_core_dumps
from vocabulary.control.goals import GoalResult
from vocabulary.spec.backends import BackendConfig
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.state import ServingState
from vocabulary.control.goal_api import CONTROLLER_NAME
from vocabulary.control.ownership import Owner
from vocabulary.control.request_stats import RequestStats
from vocabulary.replicas.replica_output import OutputCursor, ReplicaOutput
from vocabulary.control.status import ClusterStatus

__all__ = ["ControllerActor", "ControllerOptions", "ClusterAdapter"]


def _prometheus_asker(options: ControllerOptions) -> Asker:
    from controller.shell.prometheus import asker

    return asker(options.prometheus_timeout_s)


def _ray_storage(namespace: str) -> Storage:
    from controller.persistence.ray_kv import RayKVStorage

    return RayKVStorage(namespace)


def _ray_adapter(namespace: str, secrets: SecretKeeper, options: ControllerOptions) -> ClusterAdapter:
    from controller.shell.ray_adapter import RayAdapter

    adapter = RayAdapter(namespace, options.otlp_endpoint)
    adapter.use_secrets(secrets)
    adapter.use_model_cache(options.model_cache_dir, options.model_cache_bytes)
    return adapter


class ControllerActor:
    def __init__(self, namespace: str, options: dict[str, Any] | None = None,
                 controller_name: str = CONTROLLER_NAME, *,
                 storage: Storage | None = None, adapter: ClusterAdapter | None = None,
                 asker: Asker | None = None) -> None:
        """`storage`, `adapter` and `asker` default to Ray's KV, Ray and
        Prometheus over HTTP (built when first needed); tests pass fakes."""
        settings = ControllerOptions.from_dict(options)
        if adapter is None:  # Ray's own actor: it holds the values it seals (a test's in-process one, fakes)
            no_core_dumps()
        self._secrets = SecretKeeper()  # in memory only: never in the checkpoint (controller.state.secrets)
        self._loop = ControlLoop(
            settings, controller_name, Checkpointer(storage or _ray_storage(namespace)),
            adapter or _ray_adapter(namespace, self._secrets, settings),
            (lambda: asker) if asker is not None else (lambda: _prometheus_asker(settings)),
        )
        self._loop_task = asyncio.get_event_loop().create_task(self._loop.run())

    # --- goals: what git asks for (controller.loop, over controller.state) ----------

    async def apply_backend(self, config: BackendConfig) -> str:
        return self._loop.apply_backend(BackendConfig.model_validate(config))

    async def delete_backend(self, name: str) -> str:
        return self._loop.delete_backend(name)

    async def apply_endpoint(self, config: EndpointConfig) -> str:
        return self._loop.apply_endpoint(EndpointConfig.model_validate(config))

    async def delete_endpoint(self, name: str) -> str:
        return self._loop.delete_endpoint(name)

    async def wait_for_goal(self, goal_id: str, timeout_s: float) -> GoalResult:
        return await self._loop.wait_for_goal(goal_id, timeout_s)

    async def get_state(self) -> ServingState:
        held = self._loop.held
        return ServingState(backends=held.backends.configs(), endpoints=held.endpoints.all())

    # --- the owning agent and its settings (controller.state.ownership) -------------

    async def claim(self, owner: dict[str, Any], take_over: bool) -> dict[str, Any] | None:
        """Record `owner` as this controller's agent; the other owner's record if refused."""
        holder = self._loop.claim(Owner.from_json(owner), take_over)
        return None if holder is None else holder.to_json()

    async def owner(self) -> dict[str, Any] | None:
        owner = self._loop.held.owner
        return owner.to_json() if owner else None

    async def release(self, agent_id: str) -> None:
        """Forget the owner if it is still `agent_id` (its agent stopped cleanly)."""
        self._loop.release(agent_id)

    async def set_prometheus_url(self, url: str | None) -> None:
        """The agent's --prometheus-url, given at each of its starts (checkpointed)."""
        self._loop.set_prometheus_url(url)

    # --- proxies: long poll, load reports, autoscaling ------------------------------

    async def listen_for_change(
        self, keys_to_snapshot_ids: dict[str, int], proxy_id: str | None = None
    ) -> dict[str, tuple[int, Any]]:
        held = dict(keys_to_snapshot_ids)
        self._loop.acknowledged(proxy_id, held)
        return await self._loop.longpoll.listen(held, proxy_id, self._loop.options.longpoll_timeout_s)

    async def report_load(
        self, proxy_id: str, loads: dict[str, tuple[int, int]], requests: dict[str, Any] | None = None,
        endpoint_requests: dict[str, Any] | None = None,
        reported: dict[str, float] | None = None,
        stalled: dict[str, dict[str, str]] | None = None,
        ejected: dict[str, dict[str, dict[str, Any]]] | None = None,
    ) -> None:
        """Latest (ongoing, queued) per backend from one proxy; policy lives elsewhere.
        `requests`: the proxy's answers counted per backend, for rollout checks;
        `endpoint_requests`: the same per endpoint, for the status; `reported`: the
        sum of the loads the backend's replicas reported, as this proxy saw them;
        `stalled`: per backend, the replicas the proxy found hung (`proxy.pool.stalls`),
        replaced at the next tick; `ejected`: per backend, the replicas the proxy ejected as outliers
        (`proxy.pool.outliers`), shown in the status, and replaced when ejected too often."""
        self._loop.report_load(proxy_id, loads, requests, endpoint_requests, reported, stalled, ejected)

    async def endpoint_totals(self) -> dict[str, RequestStats]:
        """Each endpoint's answers and shadow comparisons so far, over every proxy (promotions' evidence)."""
        return self._loop.endpoint_totals()

    async def get_load(self) -> dict[str, dict[str, tuple[int, int]]]:
        return dict(self._loop.loads)

    async def set_target_replicas(self, backend: str, target: int) -> None:
        """For the autoscaler: the one knob for how many replicas a backend wants."""
        self._loop.set_target_replicas(backend, target)

    async def decide_rollout(self, endpoint: str, verb: str, who: str) -> str:
        """Promote (`verb` "promote") or abort a running rollout by hand; its message.
        ValueError when there is none running (the agent says why)."""
        return self._loop.decide_rollout(endpoint, verb, who)

    # --- what it shows: status and replicas' output ------------------------------------

    async def get_status(self) -> ClusterStatus:
        return self._loop.status()

    async def replica_output(
        self, backend: str, since: float | None = None, cursors: dict[str, OutputCursor] | None = None
    ) -> list[ReplicaOutput]:
        """The own output (stdout, stderr) of every replica of `backend`, read by each replica
        from its node's log files: after each one's cursor, written since `since`, or its last lines."""
        return await self._loop.replica_output(backend, since, cursors or {})

    # --- secrets (controller.state.secrets; values cross Ray sealed, never checkpointed) ----

    async def secrets_recipient(self) -> str:
        """The public key the agent seals backends' secret values to."""
        return self._secrets.recipient()

    async def put_secrets(self, sealed: bytes) -> list[str]:
        """Backends' secret values, sealed by the agent to `secrets_recipient()`."""
        return self._secrets.put(sealed)

    async def secrets_missing(self) -> list[str]:
        """Backends whose configs name secret values this controller does not hold."""
        return self._secrets.missing(self._loop.held.backends.configs())

    # --- lifecycle and test hooks --------------------------------------------------

    async def ping(self) -> str:
        return "ok"

    async def arm_kill_switch(self, point: str) -> None:
        """Test hook: exit the process the next time the loop reaches `point`.

        Points: after_checkpoint, after_effects, after_api_checkpoint. Armed in
        memory only, so the restarted controller does not die again.
        """
        self._loop.kill_at = point

    async def shutdown_all(self) -> None:
        """Stop the loop, every proxy and replica, and forget the checkpoint."""
        self._stop_loop()
        await self._loop.shutdown_all()

    async def process_info(self) -> dict[str, float]:
        """This process's CPU seconds so far, for the idle-CPU benchmark."""
        times = os.times()
        return {"pid": os.getpid(), "cpu_s": times.user + times.system, "ticks": self._loop.ticks}

    def _stop_loop(self) -> None:
        """The loop stops at once (`shutdown_all`; in-process tests call it too)."""
        self._loop.stopping = True
        self._loop_task.cancel()
