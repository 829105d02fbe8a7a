"""A cluster status to render, for the status page and CLI tests.

Moved out of tests/component/test_status.py, whose tests use them too."""

from __future__ import annotations

from gitops.reconcile.outcomes import HistoryEntry, Outcome
from gitops.status.rollup import StatusFacts
from vocabulary.control.longpoll import ReplicaState
from vocabulary.control.status import BackendStatus, ClusterStatus, EndpointStatus, ReplicaStatus

SHA_A = "a" * 40

def entry(commit: str = SHA_A, result: Outcome = Outcome.APPLIED, errors: tuple[str, ...] = ()) -> HistoryEntry:
    return HistoryEntry(
        commit=commit, branch="main", author_time=1.0, summary="msg", started_at=10.0,
        finished_at=11.0, result=result, errors=errors,
    )

def running(replica_id: str, version: str = "v1") -> ReplicaStatus:
    return ReplicaStatus(replica_id=replica_id, state=ReplicaState.RUNNING, version=version, node_id="n")

def cluster(ready: int = 2, target: int = 2, last_error: str = "", extra: tuple[ReplicaStatus, ...] = ()) -> ClusterStatus:
    replicas = tuple(running(f"r{i}") for i in range(ready)) + extra
    return ClusterStatus(
        backends={"echo": BackendStatus(version="v1", target_replicas=target, replicas=replicas, last_error=last_error)},
        endpoints={"echo": EndpointStatus(route="/echo", traffic={"echo": 1.0})},
    )

BASE = StatusFacts(repo="/r", branch="main", path="deployments", last_attempt=entry(), last_applied=entry(),
                   cluster=cluster())
