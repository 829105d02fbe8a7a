"""A pure model of the controller's configured state, for property tests and dry runs.

`apply_action` is what one goal-API call does to the configured state (the
state `GoalAPI.get_state` reports), and `unsafe_reasons` says what would be
wrong with a state if a proxy served it. Together they let tests walk a
plan step by step and check every intermediate state.

The model is deliberately stricter than the controller: creating what
exists, or updating or deleting what does not, raises `SimulationError`,
because in a plan computed from that very state it can only be a planner
bug. Replicas, readiness and goals are not modelled here.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from vocabulary.configs import ServingState, weights_sum_to_one
from gitops.plans import Action, ActionKind

__all__ = ["SimulationError", "apply_action", "apply_plan", "unsafe_reasons"]


class SimulationError(ValueError):
    """An action that cannot apply to the state it was planned against."""


def apply_action(state: ServingState, action: Action) -> ServingState:
    """The configured state after the controller carries out `action`."""
    _check_target(state, action)
    backends = dict(state.backends)
    endpoints = dict(state.endpoints)
    if action.kind in (ActionKind.CREATE_BACKEND, ActionKind.UPDATE_BACKEND):
        backends[action.name] = action.backend
    elif action.kind in (ActionKind.CREATE_ENDPOINT, ActionKind.UPDATE_ENDPOINT):
        endpoints[action.name] = action.endpoint
    elif action.kind is ActionKind.DELETE_BACKEND:
        del backends[action.name]
    else:
        del endpoints[action.name]
    return ServingState(backends=backends, endpoints=endpoints)


def apply_plan(state: ServingState, actions: Iterable[Action]) -> list[ServingState]:
    """Every state a plan passes through, ending with the final one (start excluded)."""
    states: list[ServingState] = []
    for action in actions:
        state = apply_action(state, action)
        states.append(state)
    return states


def _check_target(state: ServingState, action: Action) -> None:
    existing = state.backends if action.kind.is_backend else state.endpoints
    exists = action.name in existing
    verb = action.kind.verb
    if verb == "create" and exists:
        raise SimulationError(f"{action.kind.value} {action.name}: it already exists")
    if verb in ("update", "delete") and not exists:
        raise SimulationError(f"{action.kind.value} {action.name}: it does not exist")
    config = action.backend if action.kind.is_backend else action.endpoint
    if verb != "delete" and (config is None or config.name != action.name):
        raise SimulationError(f"{action.kind.value} {action.name}: the action carries no config of that name")


def unsafe_reasons(state: ServingState) -> list[str]:
    """Why a proxy serving `state` could fail a request; empty when it is safe."""
    reasons: list[str] = []
    for name, endpoint in sorted(state.endpoints.items()):
        for backend, weight in sorted(endpoint.traffic.items()):
            config = state.backends.get(backend)
            if config is None:
                reasons.append(f"endpoint {name} sends traffic to missing backend {backend}")
            elif weight > 0 and config.can_have_zero_replicas():
                reasons.append(f"endpoint {name} sends traffic to backend {backend}, which may have 0 replicas")
        for backend in sorted(endpoint.shadow):
            if backend not in state.backends:
                reasons.append(f"endpoint {name} shadows to missing backend {backend}")
        if not weights_sum_to_one(endpoint.traffic):
            reasons.append(f"endpoint {name} traffic weights sum to {sum(endpoint.traffic.values())}, not 1")
    reasons.extend(_duplicate_routes(state))
    return reasons


def _duplicate_routes(state: ServingState) -> list[str]:
    by_route: dict[str, list[str]] = defaultdict(list)
    for name, endpoint in sorted(state.endpoints.items()):
        by_route[endpoint.route].append(name)
    return [
        f"route {route} is held by endpoints {', '.join(names)}"
        for route, names in sorted(by_route.items())
        if len(names) > 1
    ]
