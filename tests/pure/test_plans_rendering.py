"""How a plan reads for humans (like `terraform plan`) and as JSON."""

from __future__ import annotations

import json

import pytest

from gitops.reconcile.planner import plan
from gitops.reconcile.plans import Action, ActionKind, FieldChange, Plan, PlanSummary
from vocabulary.spec.backends import BackendConfig
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.state import ServingState


def backend(name: str, version: str = "v1", num_replicas: int = 1) -> BackendConfig:
    return BackendConfig(name=name, version=version, import_path="apps.echo:Echo", num_replicas=num_replicas)


ACTUAL = ServingState(
    backends={"echo-v1": backend("echo-v1"), "old": backend("old")},
    endpoints={
        "echo": EndpointConfig(name="echo", route="/echo", traffic={"echo-v1": 1.0}),
        "legacy": EndpointConfig(name="legacy", route="/legacy", traffic={"old": 1.0}),
    },
)
DESIRED = ServingState(
    backends={"echo-v1": backend("echo-v1", num_replicas=2), "echo-v2": backend("echo-v2", version="abc")},
    endpoints={"echo": EndpointConfig(name="echo", route="/echo", traffic={"echo-v1": 0.9, "echo-v2": 0.1})},
)

EXPECTED_TEXT = """\
~ backend echo-v1 (in place)
    num_replicas: 1 → 2
+ backend echo-v2
    version: "abc"
    import_path: "apps.echo:Echo"
    num_replicas: 1
~ endpoint echo
    traffic: {"echo-v1": 1.0} → {"echo-v1": 0.9, "echo-v2": 0.1}
- endpoint legacy
- backend old

Plan: 1 to create, 2 to update, 2 to delete.
"""


def test_text_rendering_reads_like_terraform_plan_in_apply_order() -> None:
    assert plan(DESIRED, ACTUAL).render_text() == EXPECTED_TEXT


def test_an_empty_plan_renders_as_no_changes() -> None:
    assert Plan().render_text() == "No changes.\n"


@pytest.mark.parametrize(
    ("summary", "text"),
    [
        (PlanSummary(), "No changes."),
        (PlanSummary(create=1, update=2, restart=1), "Plan: 1 to create, 2 to update (1 restart), 0 to delete."),
        (PlanSummary(update=3, restart=2, delete=1), "Plan: 0 to create, 3 to update (2 restarts), 1 to delete."),
        (PlanSummary(delete=4), "Plan: 0 to create, 0 to update, 4 to delete."),
    ],
)
def test_summary_line(summary: PlanSummary, text: str) -> None:
    assert summary.text() == text


def test_a_version_change_is_marked_restart_with_its_field_lines() -> None:
    action = Action(
        kind=ActionKind.UPDATE_BACKEND,
        name="echo-v1",
        backend=backend("echo-v1", version="v2"),
        restarts=True,
        changes=(FieldChange(field="version", old="v1", new="v2"),),
    )
    assert Plan(actions=(action,)).render_text().splitlines()[:2] == ["~ backend echo-v1 (restart)", '    version: "v1" → "v2"']


def test_an_action_moved_for_safety_says_why() -> None:
    action = Action(kind=ActionKind.DELETE_ENDPOINT, name="old", reason="frees route /echo for endpoint new")
    assert action.headline() == "- endpoint old  # frees route /echo for endpoint new"


def test_a_new_endpoint_shows_its_route_traffic_and_shadow() -> None:
    config = EndpointConfig(name="e", route="/e", traffic={"b": 1.0}, shadow={"m": 0.25})
    action = Action(kind=ActionKind.CREATE_ENDPOINT, name="e", endpoint=config)
    assert action.details() == ['route: "/e"', 'traffic: {"b": 1.0}', 'shadow: {"m": 0.25}']


def test_json_form_has_every_action_and_the_summary() -> None:
    data = json.loads(plan(DESIRED, ACTUAL).render_json())
    assert [(a["kind"], a["name"]) for a in data["actions"]] == [
        ("update_backend", "echo-v1"),
        ("create_backend", "echo-v2"),
        ("update_endpoint", "echo"),
        ("delete_endpoint", "legacy"),
        ("delete_backend", "old"),
    ]
    assert data["actions"][0]["changes"] == [{"field": "num_replicas", "old": 1, "new": 2}]
    assert data["actions"][0]["restarts"] is False
    assert data["summary"] == {"create": 1, "update": 2, "restart": 0, "delete": 2}


def test_json_form_round_trips_to_the_same_plan() -> None:
    original = plan(DESIRED, ACTUAL)
    assert Plan.model_validate(json.loads(original.render_json())) == original
