"""Autoscaling pieces the curves do not show: reports, bounds, the first count,
decision records and the per-backend memory (issue #7)."""

from __future__ import annotations

from controller.policies.autoscaling import (
    Autoscaler,
    LoadReports,
    LoadSample,
    LoadWindow,
    ScalingDirection,
    decide,
    initial_replicas,
    upscale_limit,
    wanted_replicas,
)
from vocabulary.spec.backends import AutoscalingConfig


def config(**overrides: float) -> AutoscalingConfig:
    values = dict(min_replicas=1, max_replicas=8, target_ongoing_requests=4,
                  upscale_delay_s=5, downscale_delay_s=30)
    values.update(overrides)
    return AutoscalingConfig(**values)


def window_of(*samples: tuple[float, float, int]) -> LoadWindow:
    window = LoadWindow()
    for at, demand, replicas in samples:
        window = window.observe(LoadSample(at, demand, 0.0, replicas), horizon_s=30)
    return window


# --- reports ------------------------------------------------------------------


def test_load_is_summed_over_proxies():
    reports = (LoadReports()
               .with_report("node-a", {"api": (3, 1)}, now=10.0)
               .with_report("node-b", {"api": (2, 0), "other": (9, 9)}, now=10.0))
    assert reports.total("api", now=10.5) == (5.0, 1.0)


def test_a_new_report_replaces_the_proxys_previous_one():
    reports = (LoadReports()
               .with_report("node-a", {"api": (7, 0)}, now=10.0)
               .with_report("node-a", {}, now=10.2))
    assert reports.total("api", now=10.3) == (0.0, 0.0)


def test_a_stale_report_of_a_vanished_proxy_counts_as_no_load():
    reports = (LoadReports()
               .with_report("gone", {"api": (7, 3)}, now=0.0)
               .with_report("alive", {"api": (1, 0)}, now=4.0))
    assert reports.total("api", now=4.0, ttl_s=2.0) == (1.0, 0.0)
    assert "gone" not in reports.without_expired(now=4.0, ttl_s=2.0).by_proxy


def test_queued_requests_count_as_demand():
    # 2 ongoing + 10 waiting at the proxy want 3 replicas of 4.
    window = LoadWindow().observe(LoadSample(0.0, 2.0, 10.0, 1), horizon_s=5)
    decision = decide(window, 1, config(upscale_delay_s=0), now=0.0)
    assert decision.desired == 3


# --- the window -----------------------------------------------------------------


def test_the_window_forgets_samples_beyond_the_longest_delay_but_keeps_coverage():
    window = LoadWindow()
    for step in range(100):
        window = window.observe(LoadSample(float(step), 1.0, 0.0, 1), horizon_s=10)
    assert window.samples[0].at == 89.0  # the last one at or before 99 - 10
    assert len(window.samples) == 11


def test_samples_from_before_the_last_change_do_not_count():
    window = window_of((0.0, 40.0, 2), (5.0, 40.0, 2), (6.0, 40.0, 4))
    assert [s.at for s in window.since_count(4)] == [6.0]
    decision = decide(window, 4, config(), now=6.0)
    assert decision.direction is ScalingDirection.NONE


# --- the policy -------------------------------------------------------------------


def test_wanted_replicas_is_demand_over_target_rounded_up_within_bounds():
    cfg = config()
    assert [wanted_replicas(d, cfg) for d in (0, 4, 4.01, 8, 8.000000001, 100)] == [1, 1, 2, 2, 2, 8]


def test_zero_upscale_delay_scales_on_the_first_sample():
    decision = decide(window_of((0.0, 13.0, 1)), 1, config(upscale_delay_s=0), now=0.0)
    assert (decision.direction, decision.desired) == (ScalingDirection.UP, 4)


def test_nothing_is_decided_before_the_window_covers_the_delay():
    window = window_of((0.0, 40.0, 1), (4.0, 40.0, 1))
    assert decide(window, 1, config(), now=4.0).direction is ScalingDirection.NONE


def test_a_count_outside_the_bounds_is_clamped_at_once():
    low = decide(LoadWindow(), 0, config(min_replicas=2), now=0.0)
    high = decide(LoadWindow(), 9, config(max_replicas=3), now=0.0)
    assert (low.direction, low.desired) == (ScalingDirection.UP, 2)
    assert (high.direction, high.desired) == (ScalingDirection.DOWN, 3)


def test_one_upscale_step_at_most_doubles_or_adds_four():
    assert [upscale_limit(n) for n in (0, 1, 3, 4, 10)] == [4, 5, 7, 8, 20]


def test_a_decision_says_why_in_words():
    decision = decide(window_of((0.0, 13.0, 1)), 1, config(upscale_delay_s=0), now=0.0, backend="api")
    assert decision.backend == "api"
    assert "wants 4" in decision.reason


# --- the first count: git owns the bounds, the controller owns the count ------------


def test_a_new_backend_starts_at_min_replicas():
    assert initial_replicas(config(min_replicas=2)) == 2


def test_reapplying_keeps_the_autoscaled_count_within_the_new_bounds():
    assert initial_replicas(config(min_replicas=1, max_replicas=8), previous=5) == 5
    assert initial_replicas(config(min_replicas=1, max_replicas=3), previous=5) == 3
    assert initial_replicas(config(min_replicas=6, max_replicas=8), previous=5) == 6


# --- the controller's memory -----------------------------------------------------------


def test_the_autoscaler_counts_decisions_by_direction():
    scaler = Autoscaler()
    cfg = config(upscale_delay_s=0, downscale_delay_s=0)
    scaler.record_report("node-a", {"api": (20, 0)}, now=0.0)
    up = scaler.tick({"api": (1, cfg)}, now=0.0)["api"]
    scaler.record_report("node-a", {}, now=1.0)
    down = scaler.tick({"api": (up.desired, cfg)}, now=1.0)["api"]
    scaler.tick({"api": (down.desired, cfg)}, now=2.0)
    assert (up.desired, down.desired) == (5, 1)
    assert scaler.decisions("api") == {"up": 1, "down": 1}


def test_the_autoscaler_forgets_a_backend_that_is_no_longer_autoscaled():
    scaler = Autoscaler()
    cfg = config(upscale_delay_s=0)
    scaler.record_report("node-a", {"api": (20, 0)}, now=0.0)
    scaler.tick({"api": (1, cfg)}, now=0.0)
    scaler.tick({}, now=1.0)
    assert scaler.decisions("api") == {"up": 0, "down": 0}


def test_the_autoscaler_reports_current_load_per_backend():
    scaler = Autoscaler()
    scaler.record_report("node-a", {"api": (3, 2)}, now=0.0)
    scaler.record_report("node-b", {"api": (1, 0)}, now=0.0)
    assert scaler.load("api", now=1.0) == (4.0, 2.0)


def test_fast_controller_ticks_scale_up_after_the_same_delay():
    # The autoscaler samples at most every 0.25 s, however fast the loop ticks.
    scaler = Autoscaler(sample_interval_s=0.25)
    cfg = config(upscale_delay_s=1)
    scaler.record_report("node-a", {"api": (20, 0)}, now=0.0)
    decisions = [scaler.tick({"api": (1, cfg)}, now=step * 0.1)["api"] for step in range(12)]
    first_up = next(i for i, d in enumerate(decisions) if d.changed)
    assert 0.9 <= first_up * 0.1 <= 1.1


def test_reported_load_scales_a_backend_to_reported_over_target() -> None:
    from controller.policies.autoscaling import Autoscaler

    config = AutoscalingConfig(
        min_replicas=1, max_replicas=10, target_ongoing_requests=2, target_reported_load=0.5,
        upscale_delay_s=0, downscale_delay_s=0,
    )
    scaler = Autoscaler(sample_interval_s=0)
    # Two proxies see the same two replicas; one has not heard from the second yet.
    scaler.record_report("p0", {"llm": (1, 0)}, 0.0, {"llm": 1.8})
    scaler.record_report("p1", {"llm": (1, 0)}, 0.0, {"llm": 0.9})
    decision = scaler.tick({"llm": (2, config)}, 0.1)["llm"]
    assert decision.desired == 4  # ceil(1.8 / 0.5): the fullest view counts, never the sum of both
    # Requests that want more than the reported load still win.
    scaler.record_report("p0", {"llm": (7, 3)}, 0.2, {"llm": 0.2})
    scaler.record_report("p1", {"llm": (0, 0)}, 0.2, {"llm": 0.2})
    assert scaler.tick({"llm": (2, config)}, 0.3)["llm"].desired == 5  # ceil(10 / 2)


def test_reported_load_is_ignored_without_a_target() -> None:
    from controller.policies.autoscaling import Autoscaler

    config = AutoscalingConfig(min_replicas=1, max_replicas=10, upscale_delay_s=0, downscale_delay_s=0)
    scaler = Autoscaler(sample_interval_s=0)
    scaler.record_report("p0", {"llm": (0, 0)}, 0.0, {"llm": 50.0})
    assert scaler.tick({"llm": (1, config)}, 0.1)["llm"].desired == 1
