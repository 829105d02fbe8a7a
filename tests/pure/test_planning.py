"""Example tests for `gitops.reconcile.planner.plan`: one behaviour each, table-driven where it reads well."""

from __future__ import annotations

from typing import Any

import pytest

from gitops.reconcile.planner import plan
from gitops.reconcile.plans import ActionKind, FieldChange
from gitops.reconcile.simulating import apply_plan, unsafe_reasons
from vocabulary.spec.backends import AutoscalingConfig, BackendConfig
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.state import ServingState


def backend(name: str, **fields: Any) -> BackendConfig:
    fields.setdefault("version", "v1")
    fields.setdefault("import_path", "apps.echo:Echo")
    return BackendConfig(name=name, **fields)


def endpoint(name: str, route: str | None = None, traffic: dict[str, float] | None = None, **fields: Any) -> EndpointConfig:
    return EndpointConfig(name=name, route=route or f"/{name}", traffic=traffic or {}, **fields)


def state(*objects: BackendConfig | EndpointConfig) -> ServingState:
    return ServingState(
        backends={o.name: o for o in objects if isinstance(o, BackendConfig)},
        endpoints={o.name: o for o in objects if isinstance(o, EndpointConfig)},
    )


def steps(desired: ServingState, actual: ServingState) -> list[tuple[ActionKind, str]]:
    return [(action.kind, action.name) for action in plan(desired, actual).actions]


def assert_safe_walk(desired: ServingState, actual: ServingState) -> None:
    for reached in apply_plan(actual, plan(desired, actual).actions):
        assert unsafe_reasons(reached) == []
    assert not plan(desired, reached)


ECHO = backend("echo")
ECHO_EP = endpoint("echo", traffic={"echo": 1.0})


def test_equal_states_plan_nothing() -> None:
    assert not plan(state(ECHO, ECHO_EP), state(ECHO, ECHO_EP))


def test_from_empty_backends_are_created_before_the_endpoints_that_use_them() -> None:
    desired = state(backend("b"), backend("a"), endpoint("x", traffic={"a": 0.5, "b": 0.5}))
    assert steps(desired, state()) == [
        (ActionKind.CREATE_BACKEND, "a"),
        (ActionKind.CREATE_BACKEND, "b"),
        (ActionKind.CREATE_ENDPOINT, "x"),
    ]


def test_removing_everything_deletes_endpoints_before_backends() -> None:
    assert steps(state(), state(ECHO, ECHO_EP)) == [
        (ActionKind.DELETE_ENDPOINT, "echo"),
        (ActionKind.DELETE_BACKEND, "echo"),
    ]


@pytest.mark.parametrize(
    ("change", "restarts"),
    [
        ({"version": "v2"}, True),
        ({"num_replicas": 3}, False),
        ({"user_config": {"greeting": "hi"}}, False),
        ({"max_concurrent_queries": 7}, False),
        ({"health_check_period_s": 2.0}, False),
        ({"graceful_shutdown_timeout_s": 1.0}, False),
    ],
)
def test_backend_update_restarts_exactly_when_version_changes(change: dict[str, Any], restarts: bool) -> None:
    (action,) = plan(state(backend("echo", **change)), state(ECHO)).actions
    assert action.kind is ActionKind.UPDATE_BACKEND
    assert action.restarts is restarts


def test_backend_update_lists_each_changed_field_old_and_new() -> None:
    (action,) = plan(state(backend("echo", version="v2", num_replicas=3)), state(ECHO)).actions
    assert action.changes == (
        FieldChange(field="version", old="v1", new="v2"),
        FieldChange(field="num_replicas", old=1, new=3),
    )


def test_a_new_working_dir_for_the_same_version_changes_nothing() -> None:
    assert not plan(state(backend("echo", working_dir="/tmp/commit-2")), state(backend("echo", working_dir="/tmp/commit-1")))


def test_replica_count_of_an_autoscaled_backend_is_not_a_difference() -> None:
    scaling = AutoscalingConfig(min_replicas=1, max_replicas=4, target_ongoing_requests=2)
    running = backend("echo", autoscaling=scaling, num_replicas=3)
    assert not plan(state(backend("echo", autoscaling=scaling)), state(running))


def test_changing_autoscaling_bounds_is_an_in_place_update_naming_the_bound() -> None:
    old = AutoscalingConfig(min_replicas=1, max_replicas=4, target_ongoing_requests=2)
    new = old.model_copy(update={"max_replicas": 8})
    (action,) = plan(state(backend("echo", autoscaling=new)), state(backend("echo", autoscaling=old, num_replicas=3))).actions
    assert (action.restarts, action.changes) == (False, (FieldChange(field="autoscaling.max_replicas", old=4, new=8),))


def test_endpoint_update_carries_the_new_traffic() -> None:
    desired = state(ECHO, backend("v2"), endpoint("echo", traffic={"echo": 0.9, "v2": 0.1}))
    actions = plan(desired, state(ECHO, backend("v2"), ECHO_EP)).actions
    (action,) = actions
    assert action.kind is ActionKind.UPDATE_ENDPOINT
    assert action.changes == (FieldChange(field="traffic", old={"echo": 1.0}, new={"echo": 0.9, "v2": 0.1}),)


def test_a_backend_that_loses_its_traffic_is_deleted_after_the_endpoint_moves_it() -> None:
    actual = state(backend("old"), endpoint("echo", traffic={"old": 1.0}))
    desired = state(backend("new"), endpoint("echo", traffic={"new": 1.0}))
    assert steps(desired, actual) == [
        (ActionKind.CREATE_BACKEND, "new"),
        (ActionKind.UPDATE_ENDPOINT, "echo"),
        (ActionKind.DELETE_BACKEND, "old"),
    ]
    assert_safe_walk(desired, actual)


def test_scaling_to_zero_a_backend_with_traffic_waits_for_the_endpoint_update() -> None:
    actual = state(backend("a"), backend("b"), endpoint("echo", traffic={"a": 1.0}))
    desired = state(backend("a", num_replicas=0), backend("b"), endpoint("echo", traffic={"a": 0.0, "b": 1.0}))
    assert steps(desired, actual) == [(ActionKind.UPDATE_ENDPOINT, "echo"), (ActionKind.UPDATE_BACKEND, "a")]
    assert plan(desired, actual).actions[-1].reason
    assert_safe_walk(desired, actual)


def test_scaling_to_zero_waits_for_the_delete_of_the_endpoint_that_used_it() -> None:
    actual = state(backend("a"), endpoint("gone", traffic={"a": 1.0}))
    desired = state(backend("a", num_replicas=0))
    assert steps(desired, actual) == [(ActionKind.DELETE_ENDPOINT, "gone"), (ActionKind.UPDATE_BACKEND, "a")]


def test_a_shadow_only_backend_is_scaled_to_zero_first() -> None:
    actual = state(ECHO, backend("mirror"), endpoint("echo", traffic={"echo": 1.0}, shadow={"mirror": 0.5}))
    desired = state(ECHO, backend("mirror", num_replicas=0), endpoint("echo", traffic={"echo": 1.0}, shadow={"mirror": 0.5}))
    (action,) = plan(desired, actual).actions
    assert (action.kind, action.name, action.reason) == (ActionKind.UPDATE_BACKEND, "mirror", "")


def test_a_backend_dropped_from_shadow_is_deleted_after_the_endpoint_stops_shadowing() -> None:
    actual = state(ECHO, backend("mirror"), endpoint("echo", traffic={"echo": 1.0}, shadow={"mirror": 0.5}))
    desired = state(ECHO, ECHO_EP)
    assert steps(desired, actual) == [(ActionKind.UPDATE_ENDPOINT, "echo"), (ActionKind.DELETE_BACKEND, "mirror")]


def test_a_route_taken_from_a_removed_endpoint_is_freed_first() -> None:
    actual = state(ECHO, endpoint("old", route="/echo", traffic={"echo": 1.0}))
    desired = state(ECHO, endpoint("new", route="/echo", traffic={"echo": 1.0}))
    actions = plan(desired, actual).actions
    assert [(a.kind, a.name) for a in actions] == [(ActionKind.DELETE_ENDPOINT, "old"), (ActionKind.CREATE_ENDPOINT, "new")]
    assert "frees route /echo" in actions[0].reason
    assert_safe_walk(desired, actual)


def test_a_route_taken_from_a_moving_endpoint_waits_for_the_move() -> None:
    actual = state(ECHO, endpoint("b", route="/x", traffic={"echo": 1.0}))
    desired = state(ECHO, endpoint("a", route="/x", traffic={"echo": 1.0}), endpoint("b", route="/y", traffic={"echo": 1.0}))
    assert steps(desired, actual) == [(ActionKind.UPDATE_ENDPOINT, "b"), (ActionKind.CREATE_ENDPOINT, "a")]


def test_swapped_routes_recreate_the_first_endpoint_and_never_share_a_route() -> None:
    actual = state(ECHO, endpoint("a", route="/a", traffic={"echo": 1.0}), endpoint("b", route="/b", traffic={"echo": 1.0}))
    desired = state(ECHO, endpoint("a", route="/b", traffic={"echo": 1.0}), endpoint("b", route="/a", traffic={"echo": 1.0}))
    assert steps(desired, actual) == [
        (ActionKind.DELETE_ENDPOINT, "a"),
        (ActionKind.UPDATE_ENDPOINT, "b"),
        (ActionKind.CREATE_ENDPOINT, "a"),
    ]
    assert_safe_walk(desired, actual)


def test_a_version_change_with_traffic_is_a_rolling_update_in_the_first_phase() -> None:
    desired = state(backend("echo", version="v2"), ECHO_EP)
    (action,) = plan(desired, state(ECHO, ECHO_EP)).actions
    assert (action.kind, action.restarts, action.reason) == (ActionKind.UPDATE_BACKEND, True, "")


def test_plan_order_does_not_depend_on_dict_order() -> None:
    names = ["c", "a", "b"]
    forward = state(*(backend(n) for n in names))
    backward = state(*(backend(n) for n in reversed(names)))
    assert plan(forward, state()) == plan(backward, state())
    assert steps(forward, state()) == [(ActionKind.CREATE_BACKEND, n) for n in sorted(names)]


def test_the_simulator_names_every_unsafe_serving_state() -> None:
    unsafe = state(
        backend("zero", num_replicas=0),
        endpoint("api", traffic={"zero": 0.5, "gone": 0.4}, shadow={"lost": 0.1}),
        endpoint("copy", route="/api/", traffic={"zero": 0.0, "x": 1.0}),
        backend("x"),
    )
    assert unsafe_reasons(unsafe) == [
        "endpoint api sends traffic to missing backend gone",
        "endpoint api shadows to missing backend lost",
        "endpoint api traffic weights sum to 0.9, not 1",
        "endpoint api sends traffic to backend zero, which may have 0 replicas",
        "route /api is held by endpoints api, copy",
    ]


def test_a_backend_is_created_after_the_backends_it_uses() -> None:
    desired = state(backend("a-app", uses=("z-model",)), backend("z-model"))
    assert [(a.name, a.after) for a in plan(desired, state()).actions] == [("z-model", ()), ("a-app", ("z-model",))]


def test_a_backend_that_uses_an_endpoint_comes_after_that_endpoints_backends() -> None:
    desired = state(
        backend("app", uses=("tagger",)), backend("t1"), backend("t2"),
        endpoint("tagger", traffic={"t1": 0.5, "t2": 0.5}),
    )
    assert [(a.name, a.after) for a in plan(desired, state()).actions] == [
        ("t1", ()), ("t2", ()), ("app", ("t1", "t2")), ("tagger", ()),
    ]


def test_a_caller_waits_only_for_callees_that_change() -> None:
    desired = state(backend("app", uses=("model",), version="v2"), backend("model"))
    actual = state(backend("app", uses=("model",)), backend("model"))
    [action] = plan(desired, actual).actions
    assert (action.name, action.after) == ("app", ())


def test_backends_that_use_each_other_share_a_layer_after_their_common_callee() -> None:
    desired = state(backend("a", uses=("b", "c")), backend("b", uses=("a",)), backend("c"))
    assert [(a.name, a.after) for a in plan(desired, state()).actions] == [("c", ()), ("a", ("c",)), ("b", ())]


def test_removed_callers_are_deleted_before_the_backends_they_used() -> None:
    actual = state(backend("a-model"), backend("z-app", uses=("a-model",)))
    assert [(a.kind, a.name, a.after) for a in plan(state(), actual).actions] == [
        (ActionKind.DELETE_BACKEND, "z-app", ()),
        (ActionKind.DELETE_BACKEND, "a-model", ("z-app",)),
    ]


def test_a_change_to_uses_alone_updates_in_place() -> None:
    [action] = plan(state(backend("app", uses=("model",)), backend("model")), state(backend("app"), backend("model"))).actions
    assert (action.kind, action.restarts) == (ActionKind.UPDATE_BACKEND, False)


def test_a_new_commit_for_an_unchanged_backend_changes_nothing() -> None:
    assert not plan(state(backend("echo", commit="c2")), state(backend("echo", commit="c1")))


def test_a_long_chain_of_uses_is_planned_callee_first() -> None:
    chain = [backend(f"b{i:04d}", uses=(f"b{i + 1:04d}",) if i < 1999 else ()) for i in range(2000)]
    names = [action.name for action in plan(state(*chain), state()).actions]
    assert names == [f"b{i:04d}" for i in reversed(range(2000))]
