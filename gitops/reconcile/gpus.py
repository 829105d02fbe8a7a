"""What a plan asks of the cluster's GPUs, and the bundles no node of it could ever hold (pure).

`capacity_problems` names each backend of a desired state whose replica asks,
in one bundle (or, under STRICT_PACK, in one bundle set), for more than the
largest node has: the agent refuses such a commit at plan time when it knows
the cluster, and `gitops plan --live` says so. `gpu_lines` says, for each
backend a plan creates or updates that reserves GPUs, how many it needs and,
when the cluster's free resources are known, whether a rolling update has
spare GPUs for its surge replica or goes one replica at a time
(`controller.state.backend_state` does so). Nodes are given as values
(`NodeResources` of the controller's status).
"""

from __future__ import annotations

from typing import Mapping

from vocabulary.control.status import NodeResources
from vocabulary.spec.backends import BackendConfig, UpdateConfig
from vocabulary.spec.placement import (
    PlacementStrategy,
    bundle_text,
    largest_bundle_problem,
    replica_bundles,
    replica_gpus,
    unplaceable,
)
from vocabulary.spec.state import ServingState
from gitops.reconcile.plans import ActionKind, Plan

__all__ = ["capacity_problems", "gpu_lines"]


def capacity_problems(desired: ServingState, nodes: Mapping[str, NodeResources]) -> dict[str, str]:
    """Backend name -> why no node of the cluster could ever hold one of its replicas' bundles."""
    capacities = [node.total for node in nodes.values()]
    problems = {}
    for name, config in sorted(desired.backends.items()):
        problem = largest_bundle_problem(config.placement, config.ray_actor_options, capacities)
        if problem:
            problems[name] = problem
    return problems


def _amount(value: float) -> str:
    return f"{value:g}"


def gpu_lines(result: Plan, desired: ServingState, actual: ServingState,
              nodes: Mapping[str, NodeResources] | None) -> list[str]:
    """One line per created or updated backend that reserves GPUs (before or after)."""
    free = [node.available for node in nodes.values()] if nodes else None
    free_gpus = sum(node.get("GPU", 0.0) for node in free) if free is not None else None
    lines = []
    for action in result.actions:
        if action.kind not in (ActionKind.CREATE_BACKEND, ActionKind.UPDATE_BACKEND):
            continue
        new = desired.backends.get(action.name)
        old = actual.backends.get(action.name)
        if new is None:
            continue
        each = replica_gpus(new.placement, new.ray_actor_options)
        before = _total(old) if old is not None else 0.0
        if each <= 0 and before <= 0:
            continue
        line = f"GPUs of {action.name}: {new.num_replicas} × {_amount(each)} = {_amount(new.num_replicas * each)} GPU"
        if old is not None:
            line += f" (now {_amount(before)})"
        if free_gpus is not None:
            line += f"; {_amount(free_gpus)} GPU free in the cluster"
        lines.append(line)
        if action.kind is ActionKind.UPDATE_BACKEND and action.restarts and each > 0:
            lines.append(_rolling(action.name, new, free))
    return lines


def _total(config: BackendConfig) -> float:
    return config.num_replicas * replica_gpus(config.placement, config.ray_actor_options)


def _rolling(name: str, config: BackendConfig, free: list[dict[str, float]] | None) -> str:
    update = config.update or UpdateConfig()
    if update.max_surge == 0:
        return f"rolling update of {name}: one replica at a time, in place (max_surge = 0)"
    if free is None:
        return f"rolling update of {name}: whether GPUs are free for a surge replica is known with --live"
    bundles = replica_bundles(config.placement, config.ray_actor_options) * update.max_surge
    strategy = config.placement.strategy if config.placement and update.max_surge == 1 else PlacementStrategy.PACK
    why = unplaceable(bundles, strategy, free)
    if not why:
        return f"rolling update of {name}: {update.max_surge} surge replica(s) fit in the free GPUs"
    need = {"GPU": sum(b.get("GPU", 0.0) for b in bundles)}
    return (f"rolling update of {name}: no spare GPUs for a surge replica ({bundle_text(need)} not free: {why}); "
            f"the update goes one replica at a time")
