"""A backend's `[placement]`: the bundles each replica reserves, and whether a cluster can offer them.

`PlacementConfig` is the table (bundles of resources, the strategy that
places one replica's bundles on nodes). The rest are pure functions over
values that the controller and the agent both ask: what one replica
reserves (`replica_bundles`, the bundles or else its actor's own
resources), its GPUs (`replica_gpus`), a bundle as people read it
(`bundle_text`), and why a set of nodes cannot offer a replica's bundles
(`unplaceable`), for the controller's status and the agent's plan alike,
and the node a replica goes to under `max_replicas_per_node` (`spread_node`).
Values only: the nodes are given as dicts of resources.
"""

from __future__ import annotations

import enum
from typing import Any, Mapping, Sequence

from pydantic import Field

from vocabulary.spec.base import Value

__all__ = [
    "PlacementStrategy",
    "PlacementConfig",
    "MAX_BUNDLES",
    "ACTOR_RESOURCE_KEYS",
    "actor_needs",
    "replica_bundles",
    "replica_gpus",
    "bundle_text",
    "unplaceable",
    "largest_bundle_problem",
    "spread_node",
]

MAX_BUNDLES = 64
# ray_actor_options keys and the Ray resource each reserves.
ACTOR_RESOURCE_KEYS = (("num_cpus", "CPU"), ("num_gpus", "GPU"), ("memory", "memory"))


class PlacementStrategy(str, enum.Enum):
    """How one replica's bundles are placed on nodes (Ray's placement group strategies)."""

    PACK = "PACK"  # as few nodes as possible
    STRICT_PACK = "STRICT_PACK"  # all on one node, or not at all
    SPREAD = "SPREAD"  # as many nodes as possible
    STRICT_SPREAD = "STRICT_SPREAD"  # each on its own node, or not at all


class PlacementConfig(Value):
    """The resources each replica reserves before it starts, as a Ray placement group:
    the replica runs in the first bundle, and the tasks and actors it starts (an
    engine's workers) in the group's bundles."""

    bundles: tuple[dict[str, float], ...] = Field(
        min_length=1,
        max_length=MAX_BUNDLES,
        description="The group's bundles, each a table of resources (CPU, GPU, memory in bytes, or custom), "
        "e.g. [{GPU = 1, CPU = 2}, {GPU = 1}]; the replica's own ray_actor_options must fit in the first.",
    )
    strategy: PlacementStrategy = Field(
        default=PlacementStrategy.PACK,
        description="How one replica's bundles are placed on nodes: PACK, STRICT_PACK (all on one node), "
        "SPREAD or STRICT_SPREAD (each on its own node).",
    )


def actor_needs(ray_actor_options: Mapping[str, Any]) -> dict[str, float]:
    """The Ray resources a replica's actor asks for in its ray_actor_options (none given: none)."""
    needs = {resource: float(ray_actor_options[key]) for key, resource in ACTOR_RESOURCE_KEYS
             if ray_actor_options.get(key)}
    for key, value in (ray_actor_options.get("resources") or {}).items():
        if value:
            needs[key] = float(value)
    return needs


def replica_bundles(placement: PlacementConfig | None, ray_actor_options: Mapping[str, Any]) -> list[dict[str, float]]:
    """What one replica reserves: its placement's bundles, else its actor's resources as one bundle."""
    if placement is not None:
        return [{k: float(v) for k, v in bundle.items() if v} for bundle in placement.bundles]
    needs = actor_needs(ray_actor_options)
    return [needs] if needs else []


def replica_gpus(placement: PlacementConfig | None, ray_actor_options: Mapping[str, Any]) -> float:
    return sum(bundle.get("GPU", 0.0) for bundle in replica_bundles(placement, ray_actor_options))


def _amount(value: float) -> str:
    return f"{value:g}"


def bundle_text(bundle: Mapping[str, float]) -> str:
    """`{GPU: 4, CPU: 2}`: GPUs first, then CPUs, then the rest by name."""
    order = {"GPU": 0, "CPU": 1}
    keys = sorted(bundle, key=lambda k: (order.get(k, 2), k))
    return "{" + ", ".join(f"{k}: {_amount(bundle[k])}" for k in keys) + "}"


def _fits(need: Mapping[str, float], offer: Mapping[str, float]) -> bool:
    return all(offer.get(k, 0.0) >= v for k, v in need.items())


def _take(offer: dict[str, float], need: Mapping[str, float]) -> None:
    for k, v in need.items():
        offer[k] = offer.get(k, 0.0) - v


def _total(bundles: Sequence[Mapping[str, float]]) -> dict[str, float]:
    total: dict[str, float] = {}
    for bundle in bundles:
        _take(total, {k: -v for k, v in bundle.items()})
    return total


def unplaceable(
    bundles: Sequence[Mapping[str, float]], strategy: PlacementStrategy, nodes: Sequence[Mapping[str, float]],
) -> str:
    """Why `nodes` (each its free resources) cannot hold one replica's `bundles` now; "" when they can.

    A first-fit check, as exact as it needs to be to say why a replica waits:
    STRICT_PACK needs one node offering every bundle together, STRICT_SPREAD a
    distinct node for each bundle, PACK and SPREAD a node for each bundle."""
    bundles = [b for b in bundles if b]
    if not bundles:
        return ""
    if strategy is PlacementStrategy.STRICT_PACK or len(bundles) == 1:
        total = _total(bundles)
        if any(_fits(total, node) for node in nodes):
            return ""
        return f"no node offers {bundle_text(total)} in one bundle set"
    free = [dict(node) for node in nodes]
    used: set[int] = set()
    for bundle in sorted(bundles, key=lambda b: -sum(b.values())):
        spread = strategy is PlacementStrategy.STRICT_SPREAD
        place = next((i for i, node in enumerate(free) if (not spread or i not in used) and _fits(bundle, node)), None)
        if place is None:
            where = "a node of its own" if spread else "a node"
            return f"no node offers {bundle_text(bundle)} ({where} for each of {len(bundles)} bundles)"
        _take(free[place], bundle)
        used.add(place)
    return ""


def largest_bundle_problem(
    placement: PlacementConfig | None, ray_actor_options: Mapping[str, Any], capacities: Sequence[Mapping[str, float]],
) -> str:
    """Why no node of the cluster could ever hold a bundle of this replica (its nodes'
    total resources, not what is free now); "" when each bundle fits some node."""
    if not capacities:
        return ""
    for bundle in replica_bundles(placement, ray_actor_options):
        for key, value in sorted(bundle.items()):
            most = max(node.get(key, 0.0) for node in capacities)
            if value > most:
                what = f"{_amount(value)} {key}" if key in ("GPU", "CPU") else f"{_amount(value)} of {key}"
                return f"a bundle asks for {what} but the largest node of the cluster has {_amount(most)}"
    if placement is not None and placement.strategy is PlacementStrategy.STRICT_PACK:
        total = _total(replica_bundles(placement, ray_actor_options))
        if not any(_fits(total, node) for node in capacities):
            return f"STRICT_PACK needs {bundle_text(total)} on one node and no node of the cluster has that much"
    return ""


def spread_node(per_node: Mapping[str, int], nodes: Sequence[str], max_per_node: int) -> str | None:
    """The node with the fewest of a backend's replicas (`per_node`) among `nodes`, if
    it has fewer than `max_per_node`; ties go to the first in `nodes`. None: all are full."""
    open_nodes = [node for node in nodes if per_node.get(node, 0) < max_per_node]
    if not open_nodes:
        return None
    return min(open_nodes, key=lambda node: (per_node.get(node, 0), nodes.index(node)))
