"""The agent's metrics carry the names, types, labels of docs/reference/metrics.md ("Agent") and true values."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gitops.loop.metrics import AgentMetrics, restart_increments
from vocabulary.control.longpoll import ReplicaState
from vocabulary.control.rollouts import CheckCount, CheckName, Rollout, RolloutPhase
from vocabulary.control.status import BackendStatus, ClusterStatus, EndpointStatus, ProxyState, ProxyStatus, ReplicaStatus
from vocabulary.spec.rollout_config import RolloutConfig


def samples(metrics: AgentMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.render().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(metrics: AgentMetrics, name: str, **labels: str) -> float | None:
    return samples(metrics).get((name, tuple(sorted(labels.items()))))


def types(metrics: AgentMetrics) -> dict[str, str]:
    text = metrics.render().decode()
    return {family.name: family.type for family in text_string_to_metric_families(text)}


def status(
    backends: dict[str, BackendStatus] | None = None, endpoints: dict[str, dict[str, float]] | None = None,
    goals_pending: int = 0,
) -> ClusterStatus:
    return ClusterStatus(
        backends=backends or {},
        endpoints={name: EndpointStatus(route=f"/{name}", traffic=traffic) for name, traffic in (endpoints or {}).items()},
        goals_pending=goals_pending,
    )


def backend(target: int, states: list[str], restarts: dict[str, int] | None = None) -> BackendStatus:
    replicas = tuple(
        ReplicaStatus(replica_id=f"r{i}", state=ReplicaState(state), version="v1", node_id="n")
        for i, state in enumerate(states)
    )
    return BackendStatus(version="v1", target_replicas=target, replicas=replicas, restarts=restarts or {})


def test_every_agent_metric_of_the_product_contract_is_exported_with_its_type() -> None:
    metrics = AgentMetrics()
    metrics.reconcile_finished("success", 1.0)
    metrics.commit_applied("abc", "main", 0.0)
    metrics.git_fetch("success")
    metrics.goal_finished("apply_backend", 1.0)
    metrics.cluster_observed(
        status({"b": backend(1, ["RUNNING"], {"health_check": 1})}, {"e": {"b": 1.0}})
    )
    assert types(metrics) == {
        "gitops_reconcile": "counter",
        "gitops_reconcile_duration_seconds": "histogram",
        "gitops_commit_to_apply_seconds": "histogram",
        "gitops_applied_commit_info": "gauge",
        "gitops_sync_status": "gauge",
        "gitops_git_fetch": "counter",
        "gitops_last_fetch_success_timestamp_seconds": "gauge",
        "gitops_spec_errors": "gauge",
        "gitops_drift_corrections": "counter",
        "gitops_goals_pending": "gauge",
        "gitops_goal_duration_seconds": "histogram",
        "gitops_backend_replicas": "gauge",
        "gitops_backend_target_replicas": "gauge",
        "gitops_replica_restarts": "counter",
        "gitops_controller_restarts": "counter",
        "gitops_proxy_restarts": "counter",
        "gitops_endpoint_traffic_weight": "gauge",
        "gitops_autoscaling_decisions": "counter",
        "gitops_notifications": "counter",
        "gitops_commit_verification": "counter",
        "gitops_rollout_step": "gauge",
        "gitops_rollout_checks": "counter",
        "gitops_rollbacks": "counter",
        "gitops_trace_spans": "counter",
        "gitops_automation_runs": "counter",
        "gitops_automation_proposals": "counter",
        "gitops_automation_errors": "counter",
    }


def test_automation_looks_are_counted_by_result_and_errors_apart() -> None:
    metrics = AgentMetrics()
    metrics.automation_run("sentiment", "proposed")
    metrics.automation_proposal("sentiment", "pull_request")
    metrics.automation_run("sentiment", "error")
    assert value(metrics, "gitops_automation_runs_total", automation="sentiment", result="proposed") == 1
    assert value(metrics, "gitops_automation_runs_total", automation="sentiment", result="error") == 1
    assert value(metrics, "gitops_automation_errors_total", automation="sentiment") == 1
    assert value(metrics, "gitops_automation_proposals_total", automation="sentiment", mode="pull_request") == 1


def test_reconciles_are_counted_by_result_and_timed() -> None:
    metrics = AgentMetrics()
    metrics.reconcile_finished("success", 0.3)
    metrics.reconcile_finished("noop", 0.05)
    metrics.reconcile_finished("noop", 0.05)
    assert value(metrics, "gitops_reconcile_total", result="noop") == 2
    assert value(metrics, "gitops_reconcile_total", result="failure") == 0
    assert value(metrics, "gitops_reconcile_duration_seconds_count") == 3
    assert value(metrics, "gitops_reconcile_duration_seconds_bucket", le="0.1") == 2


def test_an_unknown_reconcile_result_is_refused_not_exported() -> None:
    with pytest.raises(ValueError):
        AgentMetrics().reconcile_finished("maybe", 1.0)


def test_applied_commit_info_keeps_only_the_newest_commit() -> None:
    metrics = AgentMetrics(clock=lambda: 100.0)
    metrics.commit_applied("aaa", "main", 90.0)
    metrics.commit_applied("bbb", "main", 95.0)
    assert value(metrics, "gitops_applied_commit_info", commit="bbb", branch="main") == 1
    assert value(metrics, "gitops_applied_commit_info", commit="aaa", branch="main") is None


def test_commit_to_apply_latency_is_now_minus_commit_time_once_per_commit() -> None:
    metrics = AgentMetrics(clock=lambda: 100.0)
    metrics.commit_applied("aaa", "main", 88.0)
    metrics.commit_applied("aaa", "main", 88.0)
    assert value(metrics, "gitops_commit_to_apply_seconds_count") == 1
    assert value(metrics, "gitops_commit_to_apply_seconds_sum") == 12.0


def test_sync_status_is_one_for_the_current_status_and_zero_for_the_others() -> None:
    metrics = AgentMetrics()
    metrics.sync_status("Degraded")
    assert value(metrics, "gitops_sync_status", status="Degraded") == 1
    for other in ["Synced", "Progressing", "Failed", "Suspended"]:
        assert value(metrics, "gitops_sync_status", status=other) == 0


def test_replicas_are_counted_by_state_with_zeros_for_empty_states() -> None:
    metrics = AgentMetrics()
    metrics.cluster_observed(status({"b": backend(3, ["RUNNING", "RUNNING", "STARTING"])}))
    assert value(metrics, "gitops_backend_replicas", backend="b", state="RUNNING") == 2
    assert value(metrics, "gitops_backend_replicas", backend="b", state="STARTING") == 1
    assert value(metrics, "gitops_backend_replicas", backend="b", state="STOPPING") == 0
    assert value(metrics, "gitops_backend_target_replicas", backend="b") == 3


def test_a_deleted_backend_and_endpoint_leave_no_series_behind() -> None:
    metrics = AgentMetrics()
    metrics.cluster_observed(
        status({"b": backend(1, ["RUNNING"], {"died": 2})}, {"e": {"b": 1.0}})
    )
    metrics.cluster_observed(status())
    names = {name for name, labels in samples(metrics) if ("backend", "b") in labels}
    assert names == set()


def test_restart_counter_grows_by_the_controllers_cumulative_delta() -> None:
    metrics = AgentMetrics()
    metrics.cluster_observed(status({"b": backend(1, ["RUNNING"], {"died": 2})}))
    metrics.cluster_observed(status({"b": backend(1, ["RUNNING"], {"died": 5})}))
    assert value(metrics, "gitops_replica_restarts_total", backend="b", reason="died") == 5


def test_controller_restarts_are_counted_from_its_status() -> None:
    metrics = AgentMetrics()
    metrics.cluster_observed(ClusterStatus(controller_restarts=0))
    metrics.cluster_observed(ClusterStatus(controller_restarts=2))
    assert value(metrics, "gitops_controller_restarts_total") == 2


def _proxy_restarts(count: int) -> ClusterStatus:
    proxy = ProxyStatus(actor_name="gitops-proxy-n1", state=ProxyState.RUNNING, restarts=count)
    return ClusterStatus(proxies={"n1": proxy})


def test_proxy_restarts_are_counted_per_node_and_survive_a_controller_restart() -> None:
    metrics = AgentMetrics()
    for count in (1, 3, 1):  # the last reading comes from a new controller, counting from zero
        metrics.cluster_observed(_proxy_restarts(count))
    assert value(metrics, "gitops_proxy_restarts_total", node="n1") == 4


def test_restart_counter_never_goes_back_when_the_controller_restarts() -> None:
    metrics = AgentMetrics()
    metrics.cluster_observed(status({"b": backend(1, ["RUNNING"], {"died": 5})}))
    metrics.cluster_observed(status({"b": backend(1, ["RUNNING"], {"died": 1})}))
    assert value(metrics, "gitops_replica_restarts_total", backend="b", reason="died") == 6


def test_restart_increments_count_a_reset_as_growth_from_zero() -> None:
    assert restart_increments({("b", "x"): 4}, {("b", "x"): 6, ("c", "y"): 1}) == {
        ("b", "x"): 2,
        ("c", "y"): 1,
    }
    assert restart_increments({("b", "x"): 4}, {("b", "x"): 3}) == {("b", "x"): 3}
    assert restart_increments({("b", "x"): 4}, {("b", "x"): 4}) == {}


def test_traffic_weights_follow_the_controller_and_drop_removed_backends() -> None:
    metrics = AgentMetrics()
    metrics.cluster_observed(status(endpoints={"e": {"v1": 0.9, "v2": 0.1}}))
    metrics.cluster_observed(status(endpoints={"e": {"v2": 1.0}}))
    assert value(metrics, "gitops_endpoint_traffic_weight", endpoint="e", backend="v2") == 1.0
    assert value(metrics, "gitops_endpoint_traffic_weight", endpoint="e", backend="v1") is None


def test_goal_gauges_and_counters_carry_what_they_were_given() -> None:
    metrics = AgentMetrics()
    metrics.cluster_observed(status(goals_pending=3))
    metrics.spec_errors(2)
    metrics.drift_corrected()
    metrics.git_fetch("failure")
    metrics.goal_finished("apply_endpoint", 0.4)
    assert value(metrics, "gitops_goals_pending") == 3
    assert value(metrics, "gitops_spec_errors") == 2
    assert value(metrics, "gitops_drift_corrections_total") == 1
    assert value(metrics, "gitops_git_fetch_total", result="failure") == 1
    assert value(metrics, "gitops_goal_duration_seconds_count", kind="apply_endpoint") == 1


def test_two_agents_in_one_process_keep_separate_registries() -> None:
    first, second = AgentMetrics(), AgentMetrics()
    first.drift_corrected()
    assert value(second, "gitops_drift_corrections_total") == 0


def rolling(step: int, phase: str = "stepping") -> Rollout:
    return Rollout(endpoint="e", before={"b": 1.0}, target={"c": 1.0}, config=RolloutConfig(),
                   phase=RolloutPhase(phase), step=step, step_started_at=0.0)


def test_the_rollout_step_of_each_endpoint_is_1_based_and_0_without_a_rollout() -> None:
    metrics = AgentMetrics()
    cluster = status(endpoints={"e": {"b": 1.0}, "f": {"b": 1.0}})
    metrics.cluster_observed(cluster.model_copy(update={"rollouts": {"e": rolling(1)}}))
    assert value(metrics, "gitops_rollout_step", endpoint="e") == 2
    assert value(metrics, "gitops_rollout_step", endpoint="f") == 0
    metrics.cluster_observed(cluster.model_copy(update={"rollouts": {"e": rolling(1, "aborted")}}))
    assert value(metrics, "gitops_rollout_step", endpoint="e") == 0


def test_rollout_checks_follow_the_controller_s_cumulative_counts() -> None:
    metrics = AgentMetrics()
    cluster = status(endpoints={"e": {"b": 1.0}})

    def counted(n: int) -> ClusterStatus:
        count = CheckCount(endpoint="e", backend="c", check=CheckName.ERROR_RATIO, result="fail", count=n)
        return cluster.model_copy(update={"rollout_checks": (count,)})

    for n in (1, 3, 3):
        metrics.cluster_observed(counted(n))
    labels = {"endpoint": "e", "backend": "c", "check": "error_ratio", "result": "fail"}
    assert value(metrics, "gitops_rollout_checks_total", **labels) == 3


def test_the_last_successful_fetch_is_a_timestamp_that_failures_do_not_move() -> None:
    now = [1000.0]
    metrics = AgentMetrics(clock=lambda: now[0])
    metrics.git_fetch("success")
    now[0] = 1060.0
    metrics.git_fetch("failure")
    assert value(metrics, "gitops_last_fetch_success_timestamp_seconds") == 1000.0
