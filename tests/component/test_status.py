"""Status roll-up: Flux conditions, overall status, backends and endpoints."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gitops.reconcile.outcomes import Outcome
from gitops.status.rollup import AgentStatus, StatusFacts, SyncStatus, roll_up
from tests.support.status import BASE, SHA_A, cluster, entry
from vocabulary.control.longpoll import ReplicaState
from vocabulary.control.status import ReplicaStatus

SHA_B = "b" * 40


@pytest.mark.parametrize(
    ("facts", "expected", "reason"),
    [
        (BASE, SyncStatus.SYNCED, "ReconciliationSucceeded"),
        (replace(BASE, suspended=True), SyncStatus.SUSPENDED, "Suspended"),
        (replace(BASE, applying=SHA_B), SyncStatus.PROGRESSING, "Progressing"),
        (replace(BASE, last_attempt=None, last_applied=None), SyncStatus.PROGRESSING, "Progressing"),
        (replace(BASE, last_attempt=entry(SHA_B, Outcome.INVALID, ("d/a.toml:3:1: bad",))),
         SyncStatus.FAILED, "ValidationFailed"),
        (replace(BASE, last_attempt=entry(SHA_B, Outcome.FAILED, ("create backend x: boom",))),
         SyncStatus.FAILED, "ReconciliationFailed"),
        (replace(BASE, last_attempt=entry(SHA_B, Outcome.SUPERSEDED)), SyncStatus.PROGRESSING, "Progressing"),
        (replace(BASE, cluster=cluster(ready=1, last_error="ImportError: no module")),
         SyncStatus.DEGRADED, "HealthCheckFailed"),
        (replace(BASE, git_error="fetch x: unreachable"), SyncStatus.FAILED, "GitOperationFailed"),
        (replace(BASE, controller_error="controller unavailable"), SyncStatus.FAILED, "ControllerUnavailable"),
    ],
)
def test_overall_status_and_ready_reason(facts: StatusFacts, expected: SyncStatus, reason: str) -> None:
    status = roll_up(facts)
    ready = next(c for c in status.conditions if c.type == "Ready")
    assert (status.status, ready.reason, ready.status) == (expected, reason, expected is SyncStatus.SYNCED)


def test_invalid_commit_is_stalled_and_shows_errors_with_their_location() -> None:
    status = roll_up(replace(BASE, last_attempt=entry(SHA_B, Outcome.INVALID, ("deployments/a.toml:3:1: bad",))))
    assert [c.type for c in status.conditions if c.status] == ["Stalled"]
    assert status.errors == ("deployments/a.toml:3:1: bad",)
    assert SHA_B[:7] in status.conditions[0].message


def test_failed_commit_keeps_the_last_applied_revision() -> None:
    status = roll_up(replace(BASE, last_attempt=entry(SHA_B, Outcome.FAILED, ("boom",))))
    assert (status.last_attempted_revision, status.last_applied_revision) == (SHA_B, SHA_A)


def test_progressing_has_a_reconciling_condition_naming_the_commit() -> None:
    status = roll_up(replace(BASE, applying=SHA_B, progress="waiting for create backend x"))
    reconciling = next(c for c in status.conditions if c.type == "Reconciling")
    assert reconciling.status and SHA_B[:7] in reconciling.message and "create backend x" in reconciling.message


def test_backends_are_counted_by_state_and_version() -> None:
    stopping = ReplicaStatus(replica_id="old", state=ReplicaState.STOPPING, version="v0", node_id="n")
    backend = roll_up(replace(BASE, cluster=cluster(extra=(stopping,)))).backends["echo"]
    assert backend.replicas == {"RUNNING": 2, "STOPPING": 1}
    assert backend.versions == {"v1": 2, "v0": 1}
    assert backend.ready == 2


def test_endpoints_show_their_traffic() -> None:
    data = roll_up(BASE).model_dump(mode="json")
    endpoint = data["endpoints"]["echo"]
    assert (endpoint["route"], endpoint["traffic"], endpoint["shadow"]) == ("/echo", {"echo": 1.0}, {})


def test_json_form_uses_flux_field_names() -> None:
    data = roll_up(BASE).model_dump(mode="json")
    assert data["status"] == "Synced"
    assert data["conditions"][0] == {
        "type": "Ready", "status": "True", "reason": "ReconciliationSucceeded",
        "message": f"applied revision main@{SHA_A[:7]}",
    }
    assert data["last_applied_revision"] == SHA_A


def test_json_form_parses_back_into_the_same_status() -> None:
    status = roll_up(replace(BASE, last_attempt=entry(SHA_B, Outcome.INVALID, ("deployments/a.toml:3:1: bad",))))
    assert AgentStatus.model_validate(status.model_dump(mode="json")) == status


def test_json_form_of_a_backend_keeps_todays_fields_and_says_its_commit() -> None:
    observed = cluster(ready=1, last_error="boom")
    observed = observed.model_copy(update={"backends": {"echo": observed.backends["echo"].model_copy(update={"commit": SHA_A})}})
    data = roll_up(replace(BASE, cluster=observed)).model_dump(mode="json")
    today = {
        "version": "v1", "target_replicas": 2, "ready": 1, "replicas": {"RUNNING": 1}, "versions": {"v1": 1},
        "restarts": {}, "last_error": "boom", "commit": SHA_A,
    }
    assert {key: data["backends"]["echo"][key] for key in today} == today


def test_a_failed_apply_is_not_stalled_a_retry_may_help() -> None:
    status = roll_up(replace(BASE, last_attempt=entry(SHA_B, Outcome.FAILED, ("create backend x: boom",))))
    assert status.condition("Stalled") is None
