"""Promotion evidence as the controller holds it, and the pull request's body.

The proxies count answers, 5xx and shadow comparisons per endpoint and report
them with their load; the controller adds the reports up and the promotion's
counters read them through its client: one route, the one rollouts' counts
take too. Here a proxy's real `RequestCounter` reports to an in-process
controller (fakes for Ray and its storage), and the agent's counters read
its totals."""

from __future__ import annotations

import asyncio
from typing import Any

from controller.actor import ControllerActor
from controller.testing import FakeAdapter, MemoryStorage
from gitops.commands.run_environment import evidence_counters
from gitops.delivery.evidence import Counts, of_totals
from gitops.delivery.gates import (
    Evidence,
    Phase,
    PromotionSettings,
    PromotionState,
    advance,
    parse_requirement,
    promotion_body,
)
from proxy.observability.request_stats import RequestCounter
from tests.support.goals import OPTIONS, stop
from vocabulary.control.request_stats import RequestStats


def test_endpoint_totals_count_requests_5xx_and_shadow_comparisons() -> None:
    totals = {
        "echo": RequestStats(requests=90, errors=3, compared=40, mismatched=2),
        "other": RequestStats(requests=10, compared=2),
    }
    assert of_totals(totals) == Counts(requests=100, errors=3, compared=42, mismatched=2)
    assert of_totals({}) == Counts()


def test_counts_since_a_baseline_and_after_a_proxy_restart() -> None:
    later = Counts(requests=150, errors=4, compared=50, mismatched=2)
    assert later.since(Counts(100, 3, 42, 2)) == Counts(50, 1, 8, 0)
    restarted = Counts(requests=5, errors=0, compared=1, mismatched=0)
    assert restarted.since(Counts(100, 3, 42, 2)) == restarted


class _Client:
    """The agent's view of the controller: `ControllerClient.endpoint_totals` without Ray."""

    def __init__(self, controller: ControllerActor | None) -> None:
        self.controller = controller

    async def endpoint_totals(self) -> dict[str, RequestStats]:
        if self.controller is None:
            raise ConnectionError("the controller did not answer")
        return await self.controller.endpoint_totals()


def _report(counter: RequestCounter) -> dict[str, Any]:
    """What the load reporter sends (`proxy.shell.load_reporting`): JSON, per endpoint."""
    return {name: stats.model_dump(mode="json") for name, stats in counter.by_endpoint().items()}


def test_the_promotion_reads_the_totals_the_controller_adds_up_from_the_proxies_reports() -> None:
    async def scenario() -> tuple[Counts | None, Counts | None, Counts | None]:
        controller = ControllerActor("ns", OPTIONS, storage=MemoryStorage(), adapter=FakeAdapter())
        counters = evidence_counters(_Client(controller))
        try:
            one, two = RequestCounter(), RequestCounter()  # two proxy workers
            for status in (200, 200, 503):
                one.record("v2", status, 0.01, "echo")
            one.record_comparison("echo", matched=True)
            one.record_comparison("echo", matched=False)
            two.record("v1", 200, 0.01, "api")
            two.record_comparison("api", matched=True)
            await controller.report_load("p1", {}, endpoint_requests=_report(one))  # a first report counts in full
            await controller.report_load("p2", {}, endpoint_requests=_report(two))
            first = await counters()
            one.record("v2", 200, 0.01, "echo")
            one.record_comparison("echo", matched=True)
            await controller.report_load("p1", {}, endpoint_requests=_report(one))  # cumulative: only the new ones add
            await controller.report_load("p2", {}, endpoint_requests=_report(two))
            second = await counters()
        finally:
            await stop(controller)
        return first, second, await evidence_counters(_Client(None))()

    first, second, unanswered = asyncio.run(scenario())
    assert first == Counts(requests=4, errors=1, compared=3, mismatched=1)
    assert second == Counts(requests=5, errors=1, compared=4, mismatched=1)
    assert unanswered is None  # no controller, no evidence: nothing is judged on partial numbers
    # The gate judges those numbers as it judged the scraped ones.
    settings = PromotionSettings(source="staging", to="prod", branch="env/prod", soak_s=0,
                                 require=(parse_requirement("shadow_agreement >= 0.7"),))
    assert second is not None and first is not None
    counted = second.since(Counts())
    evidence = Evidence(commit="c" * 40, synced=True, backend_requests=counted.requests,
                        backend_errors=counted.errors, shadow_compared=counted.compared,
                        shadow_mismatched=counted.mismatched)
    state = advance(advance(PromotionState(), settings, evidence, 0), settings, evidence, 1)
    assert state.phase is Phase.READY, state
    assert [(gate.name, gate.passed) for gate in state.gates] == [("soak", True), ("shadow_agreement>=0.7", True)]
    assert state.gates[1].detail.startswith("0.7500 agreement over 4 compared replies"), state.gates[1]


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
