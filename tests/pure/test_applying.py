"""The applier against a fake controller: order, goals, failures, supersede."""

from __future__ import annotations

import asyncio
from typing import Any

from gitops.reconcile.applying import Deadlines, Progress, ProgressKind, apply
from gitops.reconcile.outcomes import Outcome
from gitops.reconcile.planner import plan
from gitops.reconcile.plans import ActionKind
from gitops.testing import FakeController
from vocabulary.spec.backends import BackendConfig
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.state import ServingState


def backend(name: str, version: str = "v1", replicas: int = 1) -> BackendConfig:
    return BackendConfig(name=name, version=version, import_path="apps.echo:Echo", num_replicas=replicas)


def endpoint(name: str, traffic: dict[str, float], route: str | None = None) -> EndpointConfig:
    return EndpointConfig(name=name, route=route or f"/{name}", traffic=traffic)


def state(*objects: BackendConfig | EndpointConfig) -> ServingState:
    return ServingState(
        backends={o.name: o for o in objects if isinstance(o, BackendConfig)},
        endpoints={o.name: o for o in objects if isinstance(o, EndpointConfig)},
    )


def run_apply(desired: ServingState, controller: FakeController, **options: Any):
    actual = controller.state
    return asyncio.run(apply(plan(desired, actual), controller, actual=actual, **options))


def test_new_backend_and_endpoint_are_applied_backend_first() -> None:
    controller = FakeController()
    result = run_apply(state(backend("b1"), endpoint("e", {"b1": 1.0})), controller)
    assert result.outcome is Outcome.APPLIED
    assert controller.calls == [("apply_backend", "b1"), ("apply_endpoint", "e")]
    assert len(result.done) == 2


def test_removed_objects_are_deleted_endpoint_before_backend() -> None:
    controller = FakeController(state(backend("b1"), endpoint("e", {"b1": 1.0})))
    result = run_apply(ServingState(), controller)
    assert result.outcome is Outcome.APPLIED
    assert controller.calls == [("delete_endpoint", "e"), ("delete_backend", "b1")]


def test_backends_carry_the_commits_export_as_working_dir() -> None:
    controller = FakeController()
    run_apply(state(backend("b1")), controller, working_dir="/exports/tree1")
    assert [c.working_dir for c in controller.configs] == ["/exports/tree1"]


def test_backends_carry_the_commit_they_are_applied_from() -> None:
    controller = FakeController()
    run_apply(state(backend("b1"), endpoint("e", {"b1": 1.0})), controller, working_dir="/x", commit="abc123")
    assert [c.commit for c in controller.configs] == ["abc123"]


def test_failed_backend_goal_stops_the_apply_and_names_action_backend_and_reason() -> None:
    controller = FakeController(failing={"b2": "ImportError: No module named 'nope'"})
    desired = state(backend("b2"), endpoint("e", {"b2": 1.0}))
    result = run_apply(desired, controller)
    assert result.outcome is Outcome.FAILED
    assert result.error == "create backend b2: ImportError: No module named 'nope'"
    assert ("apply_endpoint", "e") not in controller.calls


def test_controller_refusal_is_a_failure_with_the_controllers_message() -> None:
    controller = FakeController(refuse={"e": "traffic names unknown backend 'zz'"})
    result = run_apply(state(backend("b1"), endpoint("e", {"b1": 1.0})), controller)
    assert result.outcome is Outcome.FAILED
    assert result.error == "create endpoint e: controller refused: traffic names unknown backend 'zz'"


def test_goal_not_met_before_its_deadline_fails_the_apply() -> None:
    controller = FakeController(stuck={"b1"})
    result = run_apply(state(backend("b1")), controller, deadlines=Deadlines(backend_s=0.05))
    assert result.outcome is Outcome.FAILED
    assert result.error == "create backend b1: not done after 0.05 s"


def test_newer_commit_supersedes_the_apply_at_the_next_safe_point() -> None:
    controller = FakeController()

    async def newer_commit_arrived() -> bool:
        return ("apply_backend", "b1") in controller.calls

    result = run_apply(state(backend("b1"), endpoint("e", {"b1": 1.0})), controller,
                       superseded=newer_commit_arrived)
    assert result.outcome is Outcome.SUPERSEDED
    assert controller.calls == [("apply_backend", "b1")]


def test_long_goal_wait_notices_a_newer_commit() -> None:
    controller = FakeController(stuck={"b1"})
    checks: list[int] = []

    async def newer_commit_arrived() -> bool:
        checks.append(1)
        return len(checks) > 1

    result = asyncio.run(asyncio.wait_for(apply(
        plan(state(backend("b1")), ServingState()), controller, actual=ServingState(),
        superseded=newer_commit_arrived), timeout=5))
    assert result.outcome is Outcome.SUPERSEDED


def test_traffic_is_not_moved_to_an_untouched_backend_that_is_not_ready() -> None:
    # b2's rollout failed in an earlier commit: the controller holds its
    # config, so the plan has no backend action for it, only the traffic.
    actual = state(backend("b1"), backend("b2"), endpoint("e", {"b1": 1.0}))
    controller = FakeController(actual, failing={"b2": "constructor raised"})
    result = run_apply(state(backend("b1"), backend("b2"), endpoint("e", {"b2": 1.0})), controller)
    assert result.outcome is Outcome.FAILED
    assert "b2" in result.error and "constructor raised" in result.error
    assert ("apply_endpoint", "e") not in controller.calls


def test_readiness_gate_is_a_repeat_of_the_current_config_and_not_counted_as_done() -> None:
    actual = state(backend("b1"), backend("b2"), endpoint("e", {"b1": 1.0}))
    controller = FakeController(actual)
    result = run_apply(state(backend("b1"), backend("b2"), endpoint("e", {"b2": 1.0})), controller)
    assert result.outcome is Outcome.APPLIED
    assert controller.configs == [actual.backends["b2"]]
    assert [a.name for a in result.done] == ["e"]


def test_goal_timings_are_reported_per_kind() -> None:
    result = run_apply(state(backend("b1"), endpoint("e", {"b1": 1.0})), FakeController())
    assert [goal.kind.value for goal in result.goals] == ["create_backend", "create_endpoint"]


def test_a_failed_apply_carries_the_failed_action_as_data() -> None:
    controller = FakeController(failing={"b2": "ImportError: No module named 'nope'"})
    result = run_apply(state(backend("b2"), endpoint("e", {"b2": 1.0})), controller)
    assert result.failed_action is not None
    assert (result.failed_action.kind, result.failed_action.name) == (ActionKind.CREATE_BACKEND, "b2")


def test_progress_names_the_actions_waited_for_as_data() -> None:
    seen: list[Progress] = []
    run_apply(state(backend("a"), backend("b"), endpoint("e", {"a": 1.0})), FakeController(),
              on_progress=seen.append)
    waiting = [p for p in seen if p.kind is ProgressKind.WAITING]
    assert [p.backends() for p in waiting] == [["a", "b"]]
    assert waiting[0].text() == "waiting for create backend a, create backend b"


def test_reapplying_the_same_state_calls_nothing() -> None:
    desired = state(backend("b1"), endpoint("e", {"b1": 1.0}))
    controller = FakeController(desired)
    result = run_apply(desired, controller)
    assert result.outcome is Outcome.APPLIED and controller.calls == []


def test_a_backend_starts_only_after_the_backends_it_uses_are_ready() -> None:
    controller = FakeController()
    calls_seen_at_wait: list[list[tuple[str, str]]] = []
    progress = lambda p: calls_seen_at_wait.append(list(controller.calls))  # noqa: E731  # a one-line callback reads best as a lambda
    caller = backend("app").model_copy(update={"uses": ("model",)})
    run_apply(state(caller, backend("model"), backend("other")), controller, on_progress=progress)
    assert calls_seen_at_wait == [
        [("apply_backend", "model"), ("apply_backend", "other")],
        [("apply_backend", "model"), ("apply_backend", "other"), ("apply_backend", "app")],
    ]


def test_a_backend_is_not_started_when_a_backend_it_uses_fails() -> None:
    controller = FakeController(failing={"model": "ImportError: no module named torch"})
    caller = backend("app").model_copy(update={"uses": ("model",)})
    result = run_apply(state(caller, backend("model")), controller)
    assert result.outcome is Outcome.FAILED
    assert controller.calls == [("apply_backend", "model")]
