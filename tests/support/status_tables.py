"""An agent's status as the status tables read it, for the status tests.

Moved out of tests/component/test_status_tables.py, whose tests use them too."""

from __future__ import annotations

from gitops.reconcile.outcomes import HistoryEntry, Outcome
from gitops.status.rollup import AgentStatus, StatusFacts, roll_up
from vocabulary.control.longpoll import ReplicaState
from vocabulary.control.status import BackendStatus, ClusterStatus, EndpointStatus, ReplicaStatus

SHA = "0123456789abcdef" * 2 + "01234567"

def agent_status(**facts) -> AgentStatus:
    version = "abcdef1234567890"
    replicas = tuple(
        ReplicaStatus(replica_id=f"r{i}", state=ReplicaState.RUNNING, version=version) for i in range(2)
    )
    cluster = ClusterStatus(
        backends={"echo-v1": BackendStatus(version=version, target_replicas=2, replicas=replicas, commit=SHA)},
        endpoints={"echo": EndpointStatus(route="/echo", traffic={"echo-v1": 0.9, "echo-v2": 0.1})},
    )
    entry = HistoryEntry(commit=SHA, branch="main", author_time=0, summary="s", started_at=0, finished_at=1,
                         result=Outcome.APPLIED)
    base = dict(repo="/srv/repo", branch="main", path="deployments", last_attempt=entry, last_applied=entry,
                cluster=cluster)
    return roll_up(StatusFacts(**{**base, **facts}))
