"""The agent's own lines about replicas, proxies and the controller that died and came back."""

from __future__ import annotations

from gitops.status.restarts import restart_lines
from vocabulary.control.status import ClusterStatus, ProxyState, ProxyStatus, ReplicaFailure


def failure(serial: int, replica_id: str = "7") -> ReplicaFailure:
    return ReplicaFailure(serial=serial, backend="pid", replica_id=replica_id, reason="died", error="exit SIGKILL")


def proxy(restarts: int) -> dict[str, ProxyStatus]:
    return {"n1": ProxyStatus(actor_name="gitops-proxy-n1", state=ProxyState.RUNNING, restarts=restarts)}


def test_a_replaced_replica_is_said_once_with_backend_replica_and_reason():
    before = ClusterStatus(replica_failures=(failure(1, "3"),))
    now = ClusterStatus(replica_failures=(failure(1, "3"), failure(2, "7")))
    assert restart_lines(before, now) == ["replica 7 of backend pid died: exit SIGKILL; a replacement starts"]
    assert restart_lines(now, now) == []


def test_a_proxy_back_as_a_new_process_is_said_with_its_node():
    lines = restart_lines(ClusterStatus(proxies=proxy(0)), ClusterStatus(proxies=proxy(1)))
    assert lines == ["proxy on node n1 restarted as a new process (restart 1)"]


def test_a_controller_restart_is_said_and_its_failures_counted_afresh():
    before = ClusterStatus(controller_restarts=0, replica_failures=(failure(1), failure(2)))
    now = ClusterStatus(controller_restarts=1, replica_failures=(failure(1, "9"),))
    assert restart_lines(before, now) == [
        "controller restarted and recovered its checkpoint (restart 1)",
        "replica 9 of backend pid died: exit SIGKILL; a replacement starts",
    ]


def test_an_agent_just_started_does_not_repeat_old_replica_failures():
    assert restart_lines(None, ClusterStatus(replica_failures=(failure(1),))) == []
