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

from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.state import ServingState
from vocabulary.spec.serving_rules import Rule, ServingProblem, state_problems
from gitops.reconcile.plans import Action, ActionKind

__all__ = ["SimulationError", "apply_action", "apply_plan", "unsafe_reasons"]


class SimulationError(ValueError):
    """An action that cannot apply to the state it was planned against."""


def apply_action(state: ServingState, action: Action) -> ServingState:
    """The configured state after the controller carries out `action`."""
    _check_target(state, action)
    backends = dict(state.backends)
    endpoints = dict(state.endpoints)
    if action.kind in (ActionKind.CREATE_BACKEND, ActionKind.UPDATE_BACKEND):
        backends[action.name] = action.backend_config()
    elif action.kind in (ActionKind.CREATE_ENDPOINT, ActionKind.UPDATE_ENDPOINT):
        endpoints[action.name] = action.endpoint_config()
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
    """Why a proxy serving `state` could fail a request; empty when it is safe.

    The invariants are the serving rules of `vocabulary.spec.serving_rules`."""
    endpoints = dict(sorted(state.endpoints.items()))
    problems = state_problems(state.backends, endpoints)
    reasons = [
        _reason(problem, endpoints[str(problem.endpoint)].traffic)
        for problem in problems
        if problem.rule is not Rule.ROUTE_TAKEN
    ]
    return reasons + _shared_routes(endpoints, [p for p in problems if p.rule is Rule.ROUTE_TAKEN])


def _reason(problem: ServingProblem, traffic: dict[str, float]) -> str:
    name, backend = problem.endpoint, problem.backend
    if problem.rule is Rule.UNKNOWN_BACKEND and problem.path[2] == "traffic":
        return f"endpoint {name} sends traffic to missing backend {backend}"
    if problem.rule is Rule.UNKNOWN_BACKEND:
        return f"endpoint {name} shadows to missing backend {backend}"
    if problem.rule is Rule.ZERO_REPLICA_TRAFFIC:
        return f"endpoint {name} sends traffic to backend {backend}, which may have 0 replicas"
    return f"endpoint {name} traffic weights sum to {sum(traffic.values())}, not 1"


def _shared_routes(endpoints: dict[str, EndpointConfig], taken: list[ServingProblem]) -> list[str]:
    holders: dict[str, list[str]] = defaultdict(list)
    for problem in taken:
        holders[str(problem.other)].append(str(problem.endpoint))
    return [
        f"route {endpoints[owner].route} is held by endpoints {', '.join([owner, *names])}"
        for owner, names in sorted(holders.items(), key=lambda item: endpoints[item[0]].route)
    ]
