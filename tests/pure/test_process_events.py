"""The agent's own lines about replicas, proxies and the controller that died and came back."""

from __future__ import annotations

from gitops.status.restarts import FailureLog, restart_lines
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


def start_failure(serial: int, backend: str = "hello-v1", reason: str = "startup_failed") -> ReplicaFailure:
    return ReplicaFailure(serial=serial, backend=backend, replica_id=f"r{serial}", reason=reason,
                          error="model weights: sha256 mismatch")


def test_failures_of_one_kind_are_one_line_per_interval_then_one_summary() -> None:
    """Issue 49 row 5: a replica failing the same way at every start is said once per interval, not
    once per start; the others are counted in one line when the interval is over."""
    log = FailureLog(every_s=60)
    assert log.lines([start_failure(1)], now=0) == [
        "replica r1 of backend hello-v1 failed to start: model weights: sha256 mismatch; a replacement starts"
    ]
    assert log.lines([start_failure(2), start_failure(3)], now=5) == []
    assert log.lines([start_failure(4)], now=59) == []
    assert log.lines([], now=61) == [
        "replica r4 of backend hello-v1 failed to start: model weights: sha256 mismatch; a replacement starts "
        "(3 more times the same way since the last such line)"
    ]
    assert log.lines([start_failure(5)], now=70) == []  # the summary opened a new interval
    assert log.lines([], now=122) == [
        "replica r5 of backend hello-v1 failed to start: model weights: sha256 mismatch; a replacement starts "
        "(1 more time the same way since the last such line)"
    ]
    assert log.lines([], now=183) == []  # a quiet interval ends the streak
    assert log.lines([start_failure(6)], now=190) == [
        "replica r6 of backend hello-v1 failed to start: model weights: sha256 mismatch; a replacement starts"
    ]


def test_each_backend_and_reason_is_a_kind_of_its_own() -> None:
    log = FailureLog(every_s=60)
    lines = log.lines([start_failure(1), start_failure(2, backend="other"), start_failure(3, reason="died"),
                       start_failure(4)], now=0)
    assert [line.split(":")[0] for line in lines] == [
        "replica r1 of backend hello-v1 failed to start", "replica r2 of backend other failed to start",
        "replica r3 of backend hello-v1 died",
    ]


def test_restart_lines_pass_replica_failures_through_the_failure_log() -> None:
    log = FailureLog(every_s=60)
    first = ClusterStatus(replica_failures=(start_failure(1),))
    second = ClusterStatus(replica_failures=(start_failure(1), start_failure(2), start_failure(3)))
    assert len(restart_lines(ClusterStatus(), first, log, 0)) == 1
    assert restart_lines(first, second, log, 10) == []
    assert restart_lines(second, second, log, 61) == [
        "replica r3 of backend hello-v1 failed to start: model weights: sha256 mismatch; a replacement starts "
        "(2 more times the same way since the last such line)"
    ]
