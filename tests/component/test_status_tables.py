"""`gitops status` and `gitops history` tables, from the admin API's JSON."""

from __future__ import annotations

from gitops.commands.remote import render_history, render_status
from gitops.reconcile.rollback import Quarantine, RollbackReason
from gitops.status.rollup import AgentStatus, StatusFacts, roll_up
from tests.support.status_tables import SHA, agent_status
from vocabulary.control.rollouts import Check, CheckName, Rollout, StepRecord
from vocabulary.control.status import ClusterStatus, ProxyState, ProxyStatus
from vocabulary.spec.rollout_config import RolloutConfig


def test_status_table_shows_status_commits_backends_and_traffic() -> None:
    text = render_status(agent_status())
    assert text.splitlines()[0].startswith("Status:     Synced (ReconciliationSucceeded")
    assert f"Applied:    {SHA[:7]}" in text
    assert f"echo-v1  abcdef1234567890  {SHA[:7]}  2/2    RUNNING=2" in text  # the whole version
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


def test_status_table_shows_each_rollout_s_step_bar_weights_and_checks() -> None:
    check = Check(name=CheckName.REQUESTS, backend="echo-v2", measured=30, threshold=20, passed=True)
    rollout = Rollout(endpoint="echo", before={"echo-v1": 1.0}, target={"echo-v2": 1.0},
                      config=RolloutConfig(steps=(0.1, 0.5, 0.75, 1.0)), step=2, step_started_at=0.0, checks=(check,),
                      passed=tuple(StepRecord(step=i, weights={}, checks=(), at=0.0) for i in range(2)))
    text = render_status(agent_status(cluster=ClusterStatus(rollouts={"echo": rollout})))
    assert "echo     stepping  [##>.] 3/4  echo-v1=25% echo-v2=75%  echo-v2: 30 requests >= 20" in text


def test_status_table_shows_the_quarantined_commits_and_why() -> None:
    held = Quarantine(good=SHA, held=frozenset({"f" * 40}), reason=RollbackReason.ANALYSIS)
    text = render_status(agent_status(quarantine=held))
    assert f"Quarantined: fffffff (rolled back to {SHA[:7]}, analysis; lifted by a newer commit)" in text


def test_status_table_shows_notification_providers_that_fail_with_their_last_failure() -> None:
    health = {
        "chat": {"type": "slack", "delivered": 3, "failed": 2, "dropped": 0, "queued": 0,
                 "last_failure": {"at": 1.0, "event": "applied", "commit": SHA, "error": "HTTP 502"}},
        "ci": {"type": "github", "delivered": 4, "failed": 0, "dropped": 0, "queued": 0, "last_failure": None},
    }
    text = render_status(agent_status(notifications=health))
    assert f"Notifications failing:\n  chat (slack): 2 failed, 0 dropped, 3 delivered; last: applied {SHA[:7]}: HTTP 502" in text
    assert "ci (github)" not in text


def test_status_shows_every_proxy_worker_of_every_node_as_node_colon_worker_in_text_and_json() -> None:
    node = "e7c0b8aadd8dd583a31e04a0"
    proxies = {
        key: ProxyStatus(actor_name=f"gitops-proxy-{key}", state=state, worker=worker, address="10.0.0.1:8000",
                         restarts=restarts)
        for key, worker, state, restarts in [
            (node, 0, ProxyState.RUNNING, 0), (f"{node}:1", 1, ProxyState.BACKOFF, 2)]
    }
    facts = agent_status().model_dump()
    cluster = ClusterStatus(proxies=proxies)
    status = roll_up(StatusFacts(repo="/srv/repo", branch="main", path="deployments", cluster=cluster))
    text = render_status(status)
    assert "e7c0b8aadd8d:0  running  10.0.0.1:8000  0" in text
    assert "e7c0b8aadd8d:1  backoff  10.0.0.1:8000  2" in text
    shown = AgentStatus.model_validate(status.model_dump(mode="json")).proxies
    assert {key: (p.node, p.worker, p.state) for key, p in shown.items()} == {
        node: (node, 0, "running"), f"{node}:1": (node, 1, "backoff")}
    assert facts["proxies"] == {}
