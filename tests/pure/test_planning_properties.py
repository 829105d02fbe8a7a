"""Property tests: any plan between two valid states is safe, complete and stable.

States are drawn from small name and route pools so that collisions the
planner must sequence (route swaps and handoffs, traffic leaving a backend
that scales to zero, shadow-only references) come up often.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gitops.reconcile.planner import plan
from gitops.reconcile.plans import ActionKind
from gitops.reconcile.simulating import apply_plan, unsafe_reasons
from vocabulary.spec.backends import AutoscalingConfig, BackendConfig
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.state import ServingState

BACKEND_NAMES = ["a", "b", "c", "d", "e"]
ENDPOINT_NAMES = ["p", "q", "r", "s"]
ROUTES = ["/", "/x", "/y", "/z", "/x/1"]

SETTINGS = settings(max_examples=200, deadline=None)


@st.composite
def backends(draw: st.DrawFn) -> dict[str, BackendConfig]:
    names = draw(st.lists(st.sampled_from(BACKEND_NAMES), unique=True))
    configs: dict[str, BackendConfig] = {}
    for name in names:
        scaling = None
        if draw(st.booleans()):
            low = draw(st.integers(0, 2))
            scaling = AutoscalingConfig(
                min_replicas=low, max_replicas=draw(st.integers(max(low, 1), 4)), target_ongoing_requests=2
            )
        configs[name] = BackendConfig(
            name=name,
            version=draw(st.sampled_from(["v1", "v2"])),
            import_path="apps.echo:Echo",
            num_replicas=draw(st.integers(0, 3)),
            user_config=draw(st.sampled_from([None, {"k": 1}])),
            autoscaling=scaling,
            working_dir=draw(st.sampled_from([None, "/tmp/w1", "/tmp/w2"])),
        )
    return configs


@st.composite
def weights(draw: st.DrawFn, names: list[str]) -> dict[str, float]:
    shares = [draw(st.integers(1, 4)) for _ in names]
    return {name: share / sum(shares) for name, share in zip(names, shares)}


@st.composite
def serving_states(draw: st.DrawFn) -> ServingState:
    """A valid state: what the loader accepts and a healthy controller reports."""
    configs = draw(backends())
    servable = sorted(name for name, config in configs.items() if not config.can_have_zero_replicas())
    if not servable:
        return ServingState(backends=configs)
    names = draw(st.lists(st.sampled_from(ENDPOINT_NAMES), unique=True))
    routes = draw(st.permutations(ROUTES))
    endpoints: dict[str, EndpointConfig] = {}
    for name, route in zip(names, routes):
        primary = draw(st.lists(st.sampled_from(servable), min_size=1, unique=True))
        idle = draw(st.lists(st.sampled_from(sorted(configs)), unique=True))
        traffic = draw(weights(primary))
        traffic.update({backend: 0.0 for backend in idle if backend not in traffic})
        shadow = {backend: 0.5 for backend in draw(st.lists(st.sampled_from(sorted(configs)), unique=True))}
        endpoints[name] = EndpointConfig(name=name, route=route, traffic=traffic, shadow=shadow)
    return ServingState(backends=configs, endpoints=endpoints)


def comparable(state: ServingState, desired: ServingState) -> dict[str, Any]:
    """`state` as the planner compares it against `desired`."""
    backends = {}
    for name, config in state.backends.items():
        fields = config.comparable()
        wanted = desired.backends.get(name)
        if wanted is not None and wanted.autoscaling is not None:
            fields.pop("num_replicas")
        backends[name] = fields
    endpoints = {name: config.model_dump(mode="json") for name, config in state.endpoints.items()}
    return {"backends": backends, "endpoints": endpoints}


def reversed_order(state: ServingState) -> ServingState:
    return ServingState(
        backends=dict(reversed(list(state.backends.items()))),
        endpoints=dict(reversed(list(state.endpoints.items()))),
    )


@SETTINGS
@given(serving_states())
def test_generated_states_are_safe(state: ServingState) -> None:
    assert unsafe_reasons(state) == []


@SETTINGS
@given(serving_states(), serving_states())
def test_applying_the_plan_reaches_the_desired_state(desired: ServingState, actual: ServingState) -> None:
    reached = apply_plan(actual, plan(desired, actual).actions)
    final = reached[-1] if reached else actual
    assert comparable(final, desired) == comparable(desired, desired)


@SETTINGS
@given(serving_states(), serving_states())
def test_every_intermediate_state_is_safe(desired: ServingState, actual: ServingState) -> None:
    for step, reached in enumerate(apply_plan(actual, plan(desired, actual).actions)):
        assert unsafe_reasons(reached) == [], f"after step {step}"


@SETTINGS
@given(serving_states(), serving_states())
def test_replanning_after_applying_is_empty(desired: ServingState, actual: ServingState) -> None:
    reached = apply_plan(actual, plan(desired, actual).actions)
    assert not plan(desired, reached[-1] if reached else actual)


@SETTINGS
@given(serving_states(), serving_states())
def test_plan_is_deterministic_whatever_the_dict_order(desired: ServingState, actual: ServingState) -> None:
    first = plan(desired, actual)
    assert plan(desired, actual) == first
    assert plan(reversed_order(desired), reversed_order(actual)) == first


@SETTINGS
@given(serving_states())
def test_plan_of_a_state_against_itself_is_empty(state: ServingState) -> None:
    assert not plan(state, state)
    assert plan(state, state).summary().text() == "No changes."


@SETTINGS
@given(serving_states(), serving_states())
def test_restart_flag_is_set_exactly_for_version_changes(desired: ServingState, actual: ServingState) -> None:
    for action in plan(desired, actual).actions:
        if action.kind is ActionKind.UPDATE_BACKEND:
            assert action.restarts == (actual.backends[action.name].version != desired.backends[action.name].version)
        else:
            assert not action.restarts


@SETTINGS
@given(serving_states(), serving_states())
def test_backends_are_deleted_last_and_created_before_any_endpoint_change(
    desired: ServingState, actual: ServingState
) -> None:
    kinds = [action.kind for action in plan(desired, actual).actions]
    first_endpoint = next((i for i, kind in enumerate(kinds) if not kind.is_backend), len(kinds))
    assert all(kind is not ActionKind.CREATE_BACKEND for kind in kinds[first_endpoint:])
    deletes = [i for i, kind in enumerate(kinds) if kind is ActionKind.DELETE_BACKEND]
    assert all(kind is ActionKind.DELETE_BACKEND for kind in kinds[deletes[0]:]) if deletes else True


@st.composite
def route_reshuffles(draw: st.DrawFn) -> tuple[ServingState, ServingState]:
    """An actual state and the same state with its endpoints' routes permuted (swaps, cycles)."""
    actual = draw(serving_states())
    names = sorted(actual.endpoints)
    routes = draw(st.permutations([actual.endpoints[name].route for name in names]))
    endpoints = {
        name: actual.endpoints[name].model_copy(update={"route": route}) for name, route in zip(names, routes)
    }
    return ServingState(backends=actual.backends, endpoints=endpoints), actual


@SETTINGS
@given(route_reshuffles())
def test_permuting_routes_never_holds_a_route_twice_and_reaches_desired(pair: tuple[ServingState, ServingState]) -> None:
    desired, actual = pair
    reached = apply_plan(actual, plan(desired, actual).actions)
    for step in reached:
        assert unsafe_reasons(step) == []
    assert not plan(desired, reached[-1] if reached else actual)
