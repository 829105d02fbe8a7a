"""The environment in the status: `Held` with its reason, and `gitops status` lines for branch, hold and promotion."""

from __future__ import annotations

from gitops.commands.remote import render_status
from gitops.status.environment import EnvironmentSummary
from gitops.status.rollup import SyncStatus
from tests.support.status_environment import ENVIRONMENT
from tests.support.status_tables import SHA, agent_status


def test_a_held_commit_makes_the_status_held_with_reason_sync_window() -> None:
    status = agent_status(environment=EnvironmentSummary.model_validate(ENVIRONMENT))
    assert status.status is SyncStatus.HELD
    ready = status.condition("Ready")
    assert ready is not None and (ready.status, ready.reason) == (False, "SyncWindow")
    assert ready.message == "fffffff waits: " + ENVIRONMENT["held"]["message"]  # type: ignore[index]


def test_without_a_hold_the_environment_is_shown_and_the_status_is_the_clusters() -> None:
    status = agent_status(environment=EnvironmentSummary.model_validate({**ENVIRONMENT, "held": None}))
    assert status.status is SyncStatus.SYNCED and status.environment is not None
    assert status.environment.branch == "env/staging"


def test_gitops_status_prints_the_environment_the_hold_and_the_promotion() -> None:
    lines = render_status(agent_status(environment=EnvironmentSummary.model_validate(ENVIRONMENT))).splitlines()
    at = lines.index("Environment: staging  branch env/staging")
    assert lines[at + 1:at + 5] == [
        "Held:        ffffffffffff until 2026-11-27T07:00:00Z (SyncWindow)",
        f"Promotion:   to prod (env/prod, push): Soaking {SHA[:12]}, soaked 12.5s of 900s",
        "  soak: pending (served 12s of 900s)",
        "  no_backend_errors: passed (0 of 40 answers were 5xx)",
    ]
