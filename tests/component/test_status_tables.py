"""`gitops status` and `gitops history` tables, from the admin API's JSON."""

from __future__ import annotations

from gitops.commands.admin import render_history, render_status
from gitops.ledger import HistoryEntry, Outcome
from gitops.status import AgentStatus, StatusFacts, roll_up
from vocabulary.configs import ReplicaState
from vocabulary.status import BackendStatus, ClusterStatus, EndpointStatus, ReplicaStatus

SHA = "0123456789abcdef" * 2 + "01234567"


def agent_status(**facts) -> AgentStatus:
    version = "abcdef1234567890"
    replicas = tuple(
        ReplicaStatus(replica_id=f"r{i}", state=ReplicaState.RUNNING, version=version) for i in range(2)
    )
    cluster = ClusterStatus(
        backends={"echo-v1": BackendStatus(version=version, target_replicas=2, replicas=replicas)},
        endpoints={"echo": EndpointStatus(route="/echo", traffic={"echo-v1": 0.9, "echo-v2": 0.1})},
    )
    entry = HistoryEntry(commit=SHA, branch="main", author_time=0, summary="s", started_at=0, finished_at=1,
                         result=Outcome.APPLIED)
    base = dict(repo="/srv/repo", branch="main", path="deployments", last_attempt=entry, last_applied=entry,
                cluster=cluster)
    return roll_up(StatusFacts(**{**base, **facts}))


def test_status_table_shows_status_commits_backends_and_traffic() -> None:
    text = render_status(agent_status())
    assert text.splitlines()[0].startswith("Status:     Synced (ReconciliationSucceeded")
    assert f"Applied:    {SHA[:7]}" in text
    assert "echo-v1  abcdef123456  2/2    RUNNING=2" in text
    assert "echo      /echo  echo-v1=90% echo-v2=10%" in text


def test_status_table_lists_the_errors_in_full() -> None:
    text = render_status(agent_status(git_error="fetch https://x/r.git main: could not resolve host"))
    assert text.splitlines()[0].startswith("Status:     Failed (GitOperationFailed")
    assert text.endswith("Errors:\n  fetch https://x/r.git main: could not resolve host")


def test_history_table_has_one_row_per_attempt_with_plan_or_error() -> None:
    entries = [
        {"commit": SHA, "started_at": 0.0, "result": "invalid", "duration_s": 0.12, "plan_summary": "No changes.",
         "errors": ["deployments/a.toml:1:2: bad"]},
        {"commit": "f" * 40, "started_at": 0.0, "result": "applied", "duration_s": 3.5,
         "plan_summary": "Plan: 1 to create, 0 to update, 0 to delete.", "errors": []},
    ]
    lines = render_history(entries).splitlines()
    assert lines[0].split() == ["COMMIT", "STARTED", "RESULT", "DURATION", "PLAN", "/", "ERROR"]
    assert lines[1].startswith(SHA[:7]) and "invalid" in lines[1] and "deployments/a.toml:1:2: bad" in lines[1]
    assert "3.50s" in lines[2] and "1 to create" in lines[2]


def test_empty_history_says_so() -> None:
    assert render_history([]) == "No reconciles recorded yet."
