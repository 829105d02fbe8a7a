"""The autoscaling metrics the agent exports from the controller's status (issue #7)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from gitops.loop.metrics import AgentMetrics
from vocabulary.control.status import BackendStatus, ClusterStatus


def status(target: int, up: int, down: int) -> ClusterStatus:
    backend = BackendStatus(version="v1", target_replicas=target, scaling_decisions={"up": up, "down": down})
    return ClusterStatus(backends={"api": backend})


def samples(metrics: AgentMetrics, name: str) -> dict[tuple, float]:
    text = metrics.render().decode()
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def test_scaling_decisions_are_counted_by_backend_and_direction():
    metrics = AgentMetrics()
    metrics.cluster_observed(status(target=4, up=2, down=0))
    metrics.cluster_observed(status(target=2, up=2, down=1))
    assert samples(metrics, "gitops_autoscaling_decisions_total") == {
        (("backend", "api"), ("direction", "up")): 2.0,
        (("backend", "api"), ("direction", "down")): 1.0,
    }


def test_target_replicas_follow_the_autoscaler():
    metrics = AgentMetrics()
    metrics.cluster_observed(status(target=4, up=1, down=0))
    assert samples(metrics, "gitops_backend_target_replicas") == {(("backend", "api"),): 4.0}


def test_decisions_counter_never_goes_back_when_the_controller_restarts():
    metrics = AgentMetrics()
    metrics.cluster_observed(status(target=4, up=3, down=0))
    metrics.cluster_observed(status(target=4, up=1, down=0))  # restarted, counted 1 since
    assert samples(metrics, "gitops_autoscaling_decisions_total")[
        (("backend", "api"), ("direction", "up"))] == 4.0


def test_a_deleted_backend_loses_its_decision_series():
    metrics = AgentMetrics()
    metrics.cluster_observed(status(target=4, up=1, down=0))
    metrics.cluster_observed(ClusterStatus())
    assert samples(metrics, "gitops_autoscaling_decisions_total") == {}


def test_a_backend_that_never_scaled_shows_zero_decisions():
    metrics = AgentMetrics()
    metrics.cluster_observed(status(target=1, up=0, down=0))
    assert samples(metrics, "gitops_autoscaling_decisions_total") == {
        (("backend", "api"), ("direction", "up")): 0.0,
        (("backend", "api"), ("direction", "down")): 0.0,
    }
