"""The proxies' counters as promotion evidence, and the pull request's body."""

from __future__ import annotations

from gitops.delivery.evidence import Counts, counts, metrics_urls
from gitops.delivery.gates import Evidence, PromotionSettings, PromotionState, advance, parse_requirement, promotion_body
from vocabulary.control.status import ClusterStatus, ProxyState, ProxyStatus

PAGE = """\
# HELP gitops_http_requests_total Requests answered by the proxy.
# TYPE gitops_http_requests_total counter
gitops_http_requests_total{endpoint="echo",backend="v1",code="200"} 90.0
gitops_http_requests_total{endpoint="echo",backend="v2",code="503"} 3.0
gitops_http_requests_total{endpoint="echo",backend="v2",code="404"} 7.0
# HELP gitops_shadow_comparisons_total Shadow replies compared.
# TYPE gitops_shadow_comparisons_total counter
gitops_shadow_comparisons_total{endpoint="echo",backend="v2",result="match"} 40.0
gitops_shadow_comparisons_total{endpoint="echo",backend="v2",result="mismatch"} 2.0
"""


def test_a_metrics_page_counts_requests_5xx_and_shadow_comparisons() -> None:
    assert counts(PAGE) == Counts(requests=100, errors=3, compared=42, mismatched=2)


def test_counts_since_a_baseline_and_after_a_proxy_restart() -> None:
    later = Counts(requests=150, errors=4, compared=50, mismatched=2)
    assert later.since(Counts(100, 3, 42, 2)) == Counts(50, 1, 8, 0)
    restarted = Counts(requests=5, errors=0, compared=1, mismatched=0)
    assert restarted.since(Counts(100, 3, 42, 2)) == restarted


def test_each_node_is_scraped_once_on_the_metrics_port() -> None:
    cluster = ClusterStatus(proxies={
        "n1": ProxyStatus(actor_name="p1", state=ProxyState.RUNNING, address="10.0.0.1:8000"),
        "n1:1": ProxyStatus(actor_name="p1b", worker=1, state=ProxyState.RUNNING, address="10.0.0.1:8000"),
        "n2": ProxyStatus(actor_name="p2", state=ProxyState.RUNNING, address="0.0.0.0:8000"),
    })
    assert metrics_urls(cluster, "127.0.0.1", 8002) == ["http://10.0.0.1:8002/metrics", "http://127.0.0.1:8002/metrics"]
    assert metrics_urls(None, "127.0.0.1", 9) == ["http://127.0.0.1:9/metrics"]


def test_the_pull_request_body_holds_every_gate_with_its_numbers_then_the_plan() -> None:
    settings = PromotionSettings(
        source="staging", to="prod", branch="env/prod", soak_s=60,
        require=(parse_requirement("rollouts"), parse_requirement("no_backend_errors")),
    )
    evidence = Evidence(commit="c" * 40, synced=True, rollouts_passed=("echo step 3/3: v2 at 100%",), backend_requests=80)
    state = advance(advance(PromotionState(), settings, evidence, 0), settings, evidence, 61)
    body = promotion_body("c" * 40, "v2 | faster", state, settings, "### ray-gitops plan (`prod`)\n", 61)
    assert body.splitlines()[:6] == [
        "Promotes `cccccccccccc` (v2 \\| faster) from `staging` to `prod`, after it passed every gate in `staging`.",
        "",
        "| gate | result | evidence |",
        "|---|---|---|",
        "| `soak` | passed | served 61s of 60s |",
        "| `rollouts` | passed | echo step 3/3: v2 at 100% |",
    ]
    assert "| `no_backend_errors` | passed | 0 of 80 answers were 5xx |" in body
    assert body.endswith("Soak: served 61s applied and Synced (required 60s).\n\n### ray-gitops plan (`prod`)\n")
