"""Rollout steps: traffic moves toward git's split step by step, each step judged on its own requests."""

from __future__ import annotations

from typing import Any

import pytest

from controller.policies.rollouts import RETRY_S, advance, begin, by_hand, due_queries, judge, on_config
from vocabulary.control.request_stats import LATENCY_BOUNDS_S, RequestStats, bucket_of
from vocabulary.control.rollouts import CheckName, MetricReading, Rollout, RolloutPhase, interpolate
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.rollout_config import MetricCheck, OnFailure, RolloutConfig

OLD = {"v1": 1.0}
NEW = {"v1": 0.5, "v2": 0.5}
CONFIG = RolloutConfig(steps=(0.2, 0.6, 1.0), step_interval_s=10, min_requests=10, max_error_ratio=0.05,
                       max_p99_latency_s=0.5)


def stats(requests: int, errors: int = 0, latency: float = 0.01) -> RequestStats:
    buckets = [0] * (len(LATENCY_BOUNDS_S) + 1)
    buckets[bucket_of(latency)] = requests
    return RequestStats(requests=requests, errors=errors, buckets=tuple(buckets))


def started(config: RolloutConfig = CONFIG, totals: dict[str, RequestStats] | None = None) -> Rollout:
    return begin("api", OLD, NEW, config, totals or {}, now=100.0)


def endpoint(traffic: dict[str, float], **rollout: Any) -> EndpointConfig:
    return EndpointConfig(name="api", route="/api", traffic=traffic, rollout=CONFIG.model_copy(update=rollout))


# --- weights --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("share", "weights"),
    [(0.2, {"v1": 0.9, "v2": 0.1}), (0.6, {"v1": 0.7, "v2": 0.3}), (1.0, {"v1": 0.5, "v2": 0.5})],
)
def test_each_step_applies_its_share_of_the_change(share: float, weights: dict[str, float]) -> None:
    assert interpolate(OLD, NEW, share) == pytest.approx(weights)


def test_every_step_s_weights_sum_to_one_and_drop_backends_at_zero() -> None:
    for share in (0.1, 0.33, 0.5, 1.0):
        weights = interpolate({"a": 0.3, "b": 0.7}, {"c": 1.0}, share)
        assert sum(weights.values()) == pytest.approx(1.0)
    assert interpolate({"a": 0.3, "b": 0.7}, {"c": 1.0}, 1.0) == {"c": 1.0}


def test_a_rollout_starts_at_its_first_step() -> None:
    rollout = started()
    assert rollout.phase is RolloutPhase.STEPPING and rollout.weights() == pytest.approx({"v1": 0.9, "v2": 0.1})
    assert rollout.gaining() == ("v2",) and rollout.display_step() == 1


# --- judging one step ---------------------------------------------------------------------


def test_a_step_holds_until_its_interval_has_passed() -> None:
    decision = advance(started(), {"v2": stats(50)}, now=105.0)
    assert decision.rollout == started() and decision.checks == ()


def test_a_step_holds_until_the_gaining_backend_has_enough_requests() -> None:
    decision = advance(started(), {"v2": stats(9)}, now=200.0)
    assert decision.rollout.step == 0 and decision.checks == ()


def test_a_healthy_step_passes_and_the_next_one_starts_from_the_current_totals() -> None:
    decision = advance(started(), {"v2": stats(20)}, now=110.0)
    assert decision.rollout.step == 1 and decision.rollout.step_started_at == 110.0
    assert decision.rollout.baseline == {"v2": stats(20)}
    assert {check.name for check in decision.checks} == set(CheckName) - {CheckName.METRIC}
    (record,) = decision.rollout.passed
    assert (record.step, record.at, record.checks) == (0, 110.0, decision.checks)
    assert record.weights == pytest.approx({"v1": 0.9, "v2": 0.1})
    assert all(check.passed for check in decision.checks)


def test_requests_before_the_step_do_not_count_for_it() -> None:
    rollout = advance(started(), {"v2": stats(20)}, now=110.0).rollout
    assert advance(rollout, {"v2": stats(25)}, now=120.0).rollout.step == 1


def test_passing_the_last_step_promotes_to_git_s_split() -> None:
    rollout = started()
    for step, now in enumerate((110.0, 120.0, 130.0), start=1):
        rollout = advance(rollout, {"v2": stats(20 * step)}, now=now).rollout
    assert rollout.phase is RolloutPhase.PROMOTED and rollout.weights() == NEW and rollout.display_step() == 0


@pytest.mark.parametrize(
    ("measured", "check", "value"),
    [(stats(20, errors=4), CheckName.ERROR_RATIO, 0.2), (stats(20, latency=2.0), CheckName.P99_LATENCY, 2.0)],
)
def test_a_broken_threshold_fails_the_step_at_once_with_the_measured_value(
    measured: RequestStats, check: CheckName, value: float
) -> None:
    decision = advance(started(), {"v2": measured}, now=101.0)
    assert decision.rollout.phase is RolloutPhase.ABORTED
    assert [(c.name, c.backend, c.measured) for c in decision.rollout.failed()] == [(check, "v2", value)]


def test_an_aborted_rollout_sends_traffic_back_to_the_split_before_it() -> None:
    rollout = advance(started(), {"v2": stats(20, errors=20)}, now=101.0).rollout
    assert rollout.weights() == OLD and rollout.display_step() == 0
    assert "aborted at step 1/3" in rollout.message() and "v2: error_ratio 1 > 0.05" in rollout.message()


def test_with_on_failure_pause_a_failed_step_holds_its_weights() -> None:
    rollout = started(CONFIG.model_copy(update={"on_failure": OnFailure.PAUSE}))
    paused = advance(rollout, {"v2": stats(20, errors=20)}, now=101.0).rollout
    assert paused.phase is RolloutPhase.PAUSED and paused.weights() == rollout.weights()
    assert advance(paused, {"v2": stats(100)}, now=500.0).rollout == paused


def test_thresholds_wait_for_min_requests() -> None:
    assert advance(started(), {"v2": stats(5, errors=5)}, now=101.0).rollout.phase is RolloutPhase.STEPPING


def test_with_min_requests_zero_a_step_with_no_traffic_passes_on_time_alone() -> None:
    rollout = started(CONFIG.model_copy(update={"min_requests": 0}))
    assert advance(rollout, {}, now=110.0).rollout.step == 1


def test_only_backends_gaining_weight_are_judged() -> None:
    checks = judge(CONFIG, {"v2": stats(10)})
    assert {check.backend for check in checks} == {"v2"}
    assert advance(started(), {"v1": stats(50, errors=50), "v2": stats(20)}, now=110.0).rollout.step == 1


def test_p99_is_not_checked_without_a_threshold() -> None:
    checks = judge(CONFIG.model_copy(update={"max_p99_latency_s": None}), {"v2": stats(10, latency=9.0)})
    assert [check.name for check in checks] == [CheckName.REQUESTS, CheckName.ERROR_RATIO]


# --- a new config for the endpoint ---------------------------------------------------------


@pytest.mark.parametrize(
    ("live", "config"),
    [
        (None, endpoint(NEW)),  # a new endpoint takes its traffic at once
        (OLD, EndpointConfig(name="api", route="/api", traffic=NEW)),  # no [rollout]
        (NEW, endpoint(NEW)),  # nothing to move
    ],
)
def test_traffic_applies_at_once_without_a_rollout_to_run(live: dict[str, float] | None, config: EndpointConfig) -> None:
    assert on_config(None, live, config, {}, now=0.0) is None


def test_a_changed_split_with_a_rollout_table_starts_a_rollout_from_the_live_split() -> None:
    rollout = on_config(None, OLD, endpoint(NEW), {}, now=5.0)
    assert rollout is not None and (rollout.before, rollout.target, rollout.step_started_at) == (OLD, NEW, 5.0)


def test_the_same_target_again_leaves_the_rollout_alone() -> None:
    assert on_config(started(), OLD, endpoint(NEW), {}, now=150.0) == started()


def test_an_aborted_commit_is_not_retried() -> None:
    aborted = advance(started(), {"v2": stats(20, errors=20)}, now=101.0).rollout
    assert on_config(aborted, OLD, endpoint(NEW), {}, now=200.0) == aborted


def test_a_newer_target_waits_for_the_step_boundary() -> None:
    newer = {"v1": 0.5, "v3": 0.5}
    waiting = on_config(started(), OLD, endpoint(newer), {}, now=102.0)
    assert waiting is not None and waiting.weights() == started().weights() and waiting.next_target == newer
    replaced = advance(waiting, {"v2": stats(20)}, now=110.0).rollout
    assert (replaced.before, replaced.target, replaced.step) == (started().weights(), newer, 0)


def test_a_newer_target_after_an_abort_starts_from_the_restored_split() -> None:
    aborted = advance(started(), {"v2": stats(20, errors=20)}, now=101.0).rollout
    newer = {"v1": 0.8, "v3": 0.2}
    rollout = on_config(aborted, OLD, endpoint(newer), {}, now=200.0)
    assert rollout is not None and (rollout.before, rollout.target, rollout.phase) == (OLD, newer, RolloutPhase.STEPPING)


def test_a_rollout_survives_a_json_round_trip() -> None:
    rollout = advance(started(), {"v2": stats(20, errors=20)}, now=101.0).rollout
    assert Rollout.model_validate_json(rollout.model_dump_json()) == rollout


def test_going_back_to_the_split_an_abort_restored_needs_no_rollout() -> None:
    aborted = advance(started(), {"v2": stats(20, errors=20)}, now=101.0).rollout
    assert on_config(aborted, OLD, endpoint(OLD), {}, now=200.0) is None


def test_a_newer_target_equal_to_the_current_weights_is_promoted_at_the_boundary() -> None:
    waiting = on_config(started(), OLD, endpoint(started().weights()), {}, now=102.0)
    assert waiting is not None
    assert advance(waiting, {"v2": stats(20)}, now=110.0).rollout.phase is RolloutPhase.PROMOTED


# --- PromQL checks ([[rollout.metrics]]) ----------------------------------------------------

ERRORS = MetricCheck(name="errors", query='sum(rate(x{endpoint="$endpoint",backend="$backend"}[$interval]))', max=0.1)
WITH_METRIC = CONFIG.model_copy(update={"metrics": (ERRORS,)})
HELD = 110.0  # the first step (started at 100, 10 s interval) has held


def reading(value: float | None, at: float = HELD, error: str | None = None) -> dict[tuple[str, str], MetricReading]:
    return {("errors", "v2"): MetricReading(check="errors", backend="v2", at=at, value=value, error=error)}


def test_a_metric_check_is_asked_once_the_step_has_held_with_its_variables_filled_in() -> None:
    rollout = started(WITH_METRIC)
    assert due_queries(rollout, {}, now=105.0) == ()
    (query,) = due_queries(rollout, {}, now=HELD)
    assert (query.check, query.backend) == ("errors", "v2")
    assert query.promql == 'sum(rate(x{endpoint="api",backend="v2"}[10s]))'


def test_a_reading_from_before_the_step_held_is_asked_again() -> None:
    assert len(due_queries(started(WITH_METRIC), reading(0.0, at=105.0), now=HELD)) == 1
    assert due_queries(started(WITH_METRIC), reading(0.0), now=HELD + 1) == ()


def test_a_step_whose_metric_is_within_bounds_passes_with_the_metric_among_its_checks() -> None:
    decision = advance(started(WITH_METRIC), {"v2": stats(20)}, now=HELD, readings=reading(0.05))
    assert decision.rollout.step == 1
    metric = [c for c in decision.checks if c.name is CheckName.METRIC]
    assert [(c.metric, c.measured, c.passed, c.label()) for c in metric] == [("errors", 0.05, True, "errors")]


def test_a_metric_out_of_bounds_aborts_the_rollout_with_the_value_in_its_message() -> None:
    decision = advance(started(WITH_METRIC), {"v2": stats(20)}, now=HELD, readings=reading(0.3))
    assert decision.rollout.phase is RolloutPhase.ABORTED
    assert decision.rollout.weights() == OLD
    assert "v2: errors 0.3 > 0.1" in decision.rollout.message()


def test_a_metric_below_its_min_aborts_too() -> None:
    config = CONFIG.model_copy(update={"metrics": (MetricCheck(name="errors", query="q", min=1.0),)})
    decision = advance(started(config), {"v2": stats(20)}, now=HELD, readings=reading(0.5))
    assert decision.rollout.phase is RolloutPhase.ABORTED and "errors 0.5 < 1" in decision.rollout.message()


def test_a_step_without_a_metric_reading_holds_and_does_not_pass() -> None:
    decision = advance(started(WITH_METRIC), {"v2": stats(20)}, now=HELD + 30, readings={})
    assert decision.rollout.step == 0 and decision.rollout.phase is RolloutPhase.STEPPING


def test_an_unreachable_prometheus_holds_the_step_and_says_why() -> None:
    unreachable = reading(None, error="Prometheus at 127.0.0.1:9 unreachable (ConnectError)")
    decision = advance(started(WITH_METRIC), {"v2": stats(20)}, now=HELD + 30, readings=unreachable)
    assert decision.rollout.step == 0 and decision.rollout.phase is RolloutPhase.STEPPING
    assert "held: metric check errors for v2: Prometheus at 127.0.0.1:9 unreachable" in decision.rollout.message()


def test_a_reading_without_a_value_is_asked_again_after_the_retry_delay() -> None:
    failed = reading(None, error="unreachable")
    assert due_queries(started(WITH_METRIC), failed, now=HELD + 1) == ()
    assert len(due_queries(started(WITH_METRIC), failed, now=HELD + RETRY_S)) == 1


def test_the_step_passes_once_prometheus_answers_again_and_forgets_the_error() -> None:
    held = advance(started(WITH_METRIC), {"v2": stats(20)}, now=HELD, readings=reading(None, error="down")).rollout
    decision = advance(held, {"v2": stats(20)}, now=HELD + 6, readings=reading(0.0, at=HELD + 6))
    assert decision.rollout.step == 1 and decision.rollout.analysis_error is None


# --- by hand (`gitops promote|abort`, the status page) ----------------------------------


def test_a_running_rollout_promoted_by_hand_serves_its_target_at_once() -> None:
    promoted = by_hand(started(), "api", "promote", "otto")
    assert (promoted.phase, promoted.weights(), promoted.display_step()) == (RolloutPhase.PROMOTED, NEW, 0)
    assert promoted.message() == "endpoint api: promoted by hand by otto, its steps skipped"
    assert advance(promoted, {"v2": stats(100, errors=100)}, now=1e9).rollout == promoted  # no check judges it again


def test_a_running_or_paused_rollout_aborted_by_hand_sends_traffic_back() -> None:
    paused = started(CONFIG.model_copy(update={"on_failure": OnFailure.PAUSE}))
    paused = advance(paused, {"v2": stats(20, errors=20)}, now=101.0).rollout
    assert paused.phase is RolloutPhase.PAUSED
    for rollout in (started(), paused):
        aborted = by_hand(rollout, "api", "abort", "otto")
        assert (aborted.phase, aborted.weights()) == (RolloutPhase.ABORTED, OLD)
        assert aborted.message() == "endpoint api: aborted by hand by otto at step 1/3, traffic back"


def test_by_hand_needs_a_running_rollout_and_a_known_verb() -> None:
    with pytest.raises(ValueError, match="endpoint api has no rollout"):
        by_hand(None, "api", "abort", "otto")
    over = by_hand(started(), "api", "abort", "otto")
    with pytest.raises(ValueError, match=r"the rollout of endpoint api is over \(aborted\)"):
        by_hand(over, "api", "promote", "otto")
    with pytest.raises(ValueError, match="'pause' is not promote or abort"):
        by_hand(started(), "api", "pause", "otto")
