"""The shipped monitoring assets use only the metrics and labels of docs/reference/metrics.md.

`CONTRACT` is docs/reference/metrics.md's tables; dashboards and alert rules
depend on these names, so every query of the shipped dashboard and alert
rules must reference only them, with their labels.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gitops.loop.metrics import AgentMetrics
from proxy.observability.metrics import ProxyMetrics
from vocabulary.control.status import BackendStatus, ClusterStatus, EndpointStatus, RestartReason

MONITORING = Path(__file__).resolve().parents[2] / "monitoring"

CONTRACT: dict[str, tuple[str, frozenset[str]]] = {
    "gitops_reconcile_total": ("counter", frozenset({"result"})),
    "gitops_reconcile_duration_seconds": ("histogram", frozenset()),
    "gitops_commit_to_apply_seconds": ("histogram", frozenset()),
    "gitops_applied_commit_info": ("gauge", frozenset({"commit", "branch"})),
    "gitops_sync_status": ("gauge", frozenset({"status"})),
    "gitops_git_fetch_total": ("counter", frozenset({"result"})),
    # Added with issue 16 (reliability): the alert on git going unreachable reads it.
    "gitops_last_fetch_success_timestamp_seconds": ("gauge", frozenset()),
    "gitops_spec_errors": ("gauge", frozenset()),
    "gitops_drift_corrections_total": ("counter", frozenset()),
    "gitops_goals_pending": ("gauge", frozenset()),
    "gitops_goal_duration_seconds": ("histogram", frozenset({"kind"})),
    "gitops_backend_replicas": ("gauge", frozenset({"backend", "state"})),
    "gitops_backend_target_replicas": ("gauge", frozenset({"backend"})),
    "gitops_replica_stalls_total": ("counter", frozenset({"backend"})),
    # Added with issue 46 (traffic policy): retries sent and retries the budget refused.
    "gitops_proxy_retries_total": ("counter", frozenset({"backend", "outcome"})),
    "gitops_proxy_retry_budget_exhausted_total": ("counter", frozenset({"backend"})),
    # Added with issue 46's outlier ejection: ejections made, and replicas ejected now.
    "gitops_proxy_outlier_ejections_total": ("counter", frozenset({"backend"})),
    "gitops_proxy_ejected_replicas": ("gauge", frozenset({"backend"})),
    # And its circuit limits: requests turned away, by the limit reached.
    "gitops_proxy_circuit_open_total": ("counter", frozenset({"backend", "limit"})),
    # And its deadlines that travel: requests answered 504 because their deadline passed.
    "gitops_proxy_deadline_exceeded_total": ("counter", frozenset({"endpoint", "when"})),
    "gitops_replica_restarts_total": ("counter", frozenset({"backend", "reason"})),
    # Added with issue 16 (reliability), which asks for the replica restarts' analogue
    # for the controller and the proxies.
    "gitops_controller_restarts_total": ("counter", frozenset()),
    "gitops_proxy_restarts_total": ("counter", frozenset({"node"})),
    "gitops_endpoint_traffic_weight": ("gauge", frozenset({"endpoint", "backend"})),
    "gitops_http_requests_total": ("counter", frozenset({"endpoint", "backend", "code"})),
    "gitops_http_request_duration_seconds": ("histogram", frozenset({"endpoint", "backend"})),
    "gitops_shadow_requests_total": ("counter", frozenset({"endpoint", "backend", "result"})),
    "gitops_backend_ongoing_requests": ("gauge", frozenset({"backend"})),
    # Added with issue #7 (autoscaling), which asks for decisions by direction.
    "gitops_autoscaling_decisions_total": ("counter", frozenset({"backend", "direction"})),
    # Added with issue #14 (notifications), which asks for deliveries by provider and result.
    "gitops_notifications_total": ("counter", frozenset({"provider", "result"})),
    "gitops_commit_verification_total": ("counter", frozenset({"result"})),
    # Added with issue #13 (serving what users run on Ray Serve).
    "gitops_batch_size": ("histogram", frozenset({"backend"})),
    "gitops_http_time_to_first_byte_seconds": ("histogram", frozenset({"endpoint", "backend"})),
    "gitops_http_rate_limited_total": ("counter", frozenset({"endpoint"})),
    "gitops_stream_inter_chunk_seconds": ("histogram", frozenset({"endpoint", "backend"})),
    "gitops_stream_chunks": ("histogram", frozenset({"endpoint", "backend"})),
    # Added with issue #12 (progressive delivery).
    "gitops_shadow_comparisons_total": ("counter", frozenset({"endpoint", "backend", "result"})),
    "gitops_rollout_step": ("gauge", frozenset({"endpoint"})),
    "gitops_rollbacks_total": ("counter", frozenset({"reason"})),
    # Added with issue 31 (audit trail): capture records written or dropped.
    "gitops_capture_records_total": ("counter", frozenset({"result"})),
    "gitops_trace_spans_total": ("counter", frozenset({"result"})),
    "gitops_proxy_trace_spans_total": ("counter", frozenset({"result"})),
    "gitops_rollout_checks_total": ("counter", frozenset({"endpoint", "backend", "check", "result"})),
    # Added with issue 29 (models): each node's model cache, exported by its proxies.
    "gitops_model_fetch_bytes_total": ("counter", frozenset({"model"})),
    "gitops_model_fetch_seconds": ("summary", frozenset({"model"})),
    "gitops_model_cache_hits_total": ("counter", frozenset()),
    "gitops_model_cache_bytes": ("gauge", frozenset()),
    # Added with issue 29's multiplexing: per model of a multiplexed backend.
    "gitops_model_requests_total": ("counter", frozenset({"backend", "model"})),
    "gitops_model_loads_total": ("counter", frozenset({"backend", "model"})),
    "gitops_model_evictions_total": ("counter", frozenset({"backend", "model"})),
    # Added with issue 43's token budgets: per tenant (a hash of its key, bounded per worker) of an endpoint.
    "gitops_tenant_tokens_admitted_total": ("counter", frozenset({"endpoint", "tenant"})),
    "gitops_tenant_tokens_charged_total": ("counter", frozenset({"endpoint", "tenant"})),
    "gitops_tenant_token_limited_total": ("counter", frozenset({"endpoint", "tenant"})),
    # Added with issue 43's token metrics: the engine's, per backend and model (names from the spec, capped).
    "gitops_llm_time_to_first_token_seconds": ("histogram", frozenset({"backend", "model"})),
    "gitops_llm_inter_token_seconds": ("histogram", frozenset({"backend", "model"})),
    "gitops_llm_tokens_total": ("counter", frozenset({"backend", "model", "direction"})),
    "gitops_llm_requests_total": ("counter", frozenset({"backend", "model", "result"})),
    # Added with issue 44's artifact automation: its looks, proposals and errors, per automation.
    "gitops_automation_runs_total": ("counter", frozenset({"automation", "result"})),
    "gitops_automation_proposals_total": ("counter", frozenset({"automation", "mode"})),
    "gitops_automation_errors_total": ("counter", frozenset({"automation"})),
}

# Labels Prometheus itself adds (target labels) or that histograms carry.
IMPLICIT_LABELS = frozenset({"job", "instance", "le"})
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
THRESHOLD = re.compile(r"^(?P<query>.+?)\s*(?:>|<|>=|<=|==|!=)\s*[0-9.]+$")


def dashboard_queries() -> list[str]:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def alert_rules() -> list[dict]:
    rules = yaml.safe_load((MONITORING / "alerts.yml").read_text())
    return [rule for group in rules["groups"] for rule in group["rules"]]


def all_queries() -> list[str]:
    return dashboard_queries() + [rule["expr"] for rule in alert_rules()]


def contract_name(series: str) -> str:
    """The docs/reference/metrics.md name a series in a query belongs to (histograms and summaries have suffixes)."""
    if series in CONTRACT:
        return series
    for suffix in HISTOGRAM_SUFFIXES:
        base = series.removesuffix(suffix)
        if base != series and CONTRACT.get(base, ("",))[0] in ("histogram", "summary"):
            return base
    raise AssertionError(f"{series} is not a metric of docs/reference/metrics.md")


def referenced_metrics(query: str) -> set[str]:
    return {contract_name(name) for name in re.findall(r"\bgitops_[a-z_]+", query)}


def referenced_labels(query: str) -> set[str]:
    grouped = re.findall(r"\b(?:by|ignoring|on|without)\s*\(([^)]*)\)", query)
    matched = re.findall(r"[{,]\s*([a-z_]+)\s*(?:=~|!~|!=|=)", query)
    labels = {name.strip() for group in grouped for name in group.split(",") if name.strip()}
    return labels | set(matched)


def exported_families(*registries_text: str) -> dict[str, str]:
    return {
        family.name: family.type
        for text in registries_text
        for family in text_string_to_metric_families(text)
    }


def test_the_metric_modules_export_exactly_the_contracts_metrics() -> None:
    agent, proxy = AgentMetrics(), ProxyMetrics(model_cache_dir="/nonexistent/gitops-model-cache")
    agent.goal_finished("apply_backend", 1.0)
    agent.git_fetch("success")
    agent.commit_applied("c", "main", 0.0)
    agent.cluster_observed(
        ClusterStatus(
            backends={"b": BackendStatus(version="v1", target_replicas=1, restarts={RestartReason.DIED: 1})},
            endpoints={"e": EndpointStatus(route="/e", traffic={"b": 1.0})},
        )
    )
    proxy.request_finished("e", "b", 200, 0.01)
    proxy.shadow_finished("e", "b", "ok")
    proxy.shadow_compared("e", "b", True)
    proxy.set_ongoing("b", 0)
    exported = exported_families(agent.render().decode(), proxy.render().decode())
    expected = {name.removesuffix("_total"): kind for name, (kind, _) in CONTRACT.items()}
    assert exported == expected


@pytest.mark.parametrize("query", all_queries())
def test_every_shipped_query_uses_only_contract_metrics_and_their_labels(query: str) -> None:
    metrics = referenced_metrics(query)
    assert metrics, f"query references no gitops metric: {query}"
    allowed = IMPLICIT_LABELS.union(*(CONTRACT[name][1] for name in metrics))
    assert referenced_labels(query) <= allowed, query


def test_the_dashboard_covers_every_contract_metric() -> None:
    used = set().union(*(referenced_metrics(query) for query in dashboard_queries()))
    assert used == set(CONTRACT)


def test_the_dashboard_has_the_panels_users_look_for() -> None:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    titles = {panel["title"] for panel in dashboard["panels"]}
    for wanted in [
        "Sync status",
        "Applied commit",
        "Request rate by endpoint and backend",
        "5xx ratio by endpoint and backend",
        "p50 latency by endpoint and backend",
        "p99 latency by endpoint and backend",
        "Traffic weights",
        "Replicas by state",
        "Goal duration by kind",
    ]:
        assert wanted in titles


def test_dashboard_panels_have_unique_ids_and_a_prometheus_datasource() -> None:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["type"] == "prometheus"


def test_the_required_alerts_exist_with_a_duration_and_a_summary() -> None:
    rules = {rule["alert"]: rule for rule in alert_rules()}
    for wanted in [
        "GitopsReconcileFailing",
        "GitopsSyncStalled",
        "GitopsGitUnreachable",
        "GitopsBackendBelowTarget",
        "GitopsHigh5xxRatio",
        "GitopsHighP99Latency",
    ]:
        assert wanted in rules
    for rule in rules.values():
        assert rule["for"] and rule["annotations"]["summary"] and rule["labels"]["severity"]


def test_every_alert_is_a_graphable_query_compared_with_a_threshold() -> None:
    for rule in alert_rules():
        assert THRESHOLD.match(rule["expr"]), rule["alert"]


def test_the_scrape_config_scrapes_the_agent_and_the_proxy_and_loads_the_alerts() -> None:
    config = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["gitops-agent"]["static_configs"][0]["targets"] == ["127.0.0.1:8001"]
    assert jobs["gitops-proxy"]["static_configs"][0]["targets"] == ["127.0.0.1:8002"]
    assert config["rule_files"] == ["alerts.yml"]
