"""The autoscaling policy on synthetic load curves (issue #7).

Each test drives `Autoscaler.tick` with a load curve sampled every tick and
applies every decision at once, as the controller would, then checks the
replica count over time.
"""

from __future__ import annotations

import math
import random
from typing import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.policies.autoscaling import Autoscaler, ScalingDirection
from vocabulary.spec.backends import AutoscalingConfig

TICK_S = 0.5
BACKEND = "api"

Curve = Callable[[float], float]


def config(**overrides: float) -> AutoscalingConfig:
    values = dict(
        min_replicas=1,
        max_replicas=8,
        target_ongoing_requests=4,
        upscale_delay_s=5,
        downscale_delay_s=30,
    )
    values.update(overrides)
    return AutoscalingConfig(**values)


def simulate(
    curve: Curve,
    cfg: AutoscalingConfig,
    duration_s: float,
    start: int | None = None,
    replica_start_s: float = 0.0,
    never_start: bool = False,
) -> list[tuple[float, int, ScalingDirection]]:
    """[(t, replica count after the tick, direction of the tick's decision)].

    A new replica runs `replica_start_s` after the decision that added it
    (never, with `never_start`); a removed one stops at once.
    """
    scaler = Autoscaler()
    current = cfg.min_replicas if start is None else start
    ready_at = [0.0] * current  # when each replica of the target runs
    timeline = []
    for step in range(int(duration_s / TICK_S) + 1):
        now = step * TICK_S
        running = sum(1 for t in ready_at if t <= now)
        scaler.record_report("proxy-1", {BACKEND: (curve(now), 0.0)}, now)
        decision = scaler.tick({BACKEND: (current, cfg)}, now, running={BACKEND: running})[BACKEND]
        added = max(0, decision.desired - current)
        ready_at = sorted(ready_at)[: decision.desired]
        ready_at += [float("inf") if never_start else now + replica_start_s] * added
        current = decision.desired
        timeline.append((now, current, decision.direction))
    return timeline


def count_at(timeline: list[tuple[float, int, ScalingDirection]], t: float) -> int:
    return [c for (when, c, _) in timeline if when <= t][-1]


def first_change_after(timeline, t: float) -> float | None:
    return next((when for (when, _, d) in timeline if when > t and d is not ScalingDirection.NONE), None)


def changes(timeline) -> list[tuple[float, int, ScalingDirection]]:
    return [entry for entry in timeline if entry[2] is not ScalingDirection.NONE]


def test_step_up_scales_to_the_load_once_it_held_for_the_upscale_delay():
    # The rise at t=10 has held for 90% of the 5 s delay at t=14.5.
    timeline = simulate(lambda t: 2.0 if t < 10 else 14.0, config(), 40)
    assert count_at(timeline, 14.0) == 1
    assert first_change_after(timeline, 10) == 14.5
    assert count_at(timeline, 40) == 4


def test_step_up_grows_at_most_double_or_four_per_step_and_each_step_waits_its_delay():
    timeline = simulate(lambda t: 80.0, config(max_replicas=20, upscale_delay_s=5), 30)
    steps = changes(timeline)
    assert [c for _, c, _ in steps] == [5, 10, 20]
    times = [0.0] + [when for when, _, _ in steps]
    assert all(b - a >= 0.9 * 5 for a, b in zip(times, times[1:]))


def test_the_next_upscale_step_waits_until_the_previous_steps_replicas_run():
    timeline = simulate(lambda t: 80.0, config(max_replicas=20), 40, replica_start_s=10.0)
    steps = changes(timeline)
    assert [c for _, c, _ in steps] == [5, 10, 20]
    first, second = steps[0][0], steps[1][0]
    assert second - first >= 10.0 + 0.9 * 5


def test_a_scale_down_does_not_wait_for_replicas_that_never_start():
    timeline = simulate(lambda t: 14.0 if t < 10 else 0.0, config(), 60, never_start=True)
    assert count_at(timeline, 10) == 4
    assert count_at(timeline, 60) == 1


def test_step_down_waits_the_downscale_delay_then_drops_to_the_load_in_one_step():
    timeline = simulate(lambda t: 30.0 if t < 60 else 2.0, config(), 120, start=8)
    assert count_at(timeline, 86.5) == 8  # held low for 90% of 30 s at t=87
    assert 87.0 <= first_change_after(timeline, 60) <= 90.0
    assert count_at(timeline, 90) == 1
    assert len(changes(timeline)) == 1


def test_a_spike_shorter_than_the_upscale_delay_does_not_scale_up():
    timeline = simulate(lambda t: 40.0 if 20 <= t < 24 else 4.0, config(), 120)
    assert changes(timeline) == []


def test_a_dip_shorter_than_the_downscale_delay_does_not_scale_down():
    timeline = simulate(lambda t: 0.0 if 40 <= t < 60 else 16.0, config(), 120, start=4)
    assert changes(timeline) == []


def test_brief_dips_during_a_sustained_rise_do_not_delay_the_upscale():
    # One sample in ten near zero, like gaps between requests of a busy client.
    def bursty(t: float) -> float:
        return 0.0 if int(t / TICK_S) % 10 == 3 else 14.0

    timeline = simulate(bursty, config(), 10)
    assert first_change_after(timeline, 0) == 5.0
    assert count_at(timeline, 10) == 4


def test_sine_load_is_followed_up_and_down_once_per_period_without_flapping():
    period = 120.0
    timeline = simulate(lambda t: 12.0 + 10.0 * math.sin(2 * math.pi * t / period), config(), 4 * period)
    for k in range(1, 4):  # skip the first period's warm-up
        cycle = [e for e in timeline if k * period <= e[0] < (k + 1) * period]
        counts = [c for _, c, _ in cycle]
        assert max(counts) >= 5  # demand peaks at 22: 6 replicas of 4
        assert min(counts) <= 2  # demand bottoms at 2
        directions = [d for _, _, d in cycle if d is not ScalingDirection.NONE]
        reversals = sum(1 for a, b in zip(directions, directions[1:]) if a is not b)
        assert reversals <= 2


def test_zero_traffic_scales_to_zero_when_min_replicas_is_zero():
    timeline = simulate(lambda t: 0.0, config(min_replicas=0), 60, start=3)
    assert count_at(timeline, 29.5) == 3
    assert count_at(timeline, 30) == 0


def test_zero_traffic_holds_min_replicas_without_decisions():
    timeline = simulate(lambda t: 0.0, config(min_replicas=2), 120)
    assert changes(timeline) == []
    assert count_at(timeline, 120) == 2


def test_load_never_scales_beyond_max_replicas():
    timeline = simulate(lambda t: 1000.0, config(max_replicas=6), 60)
    assert max(c for _, c, _ in timeline) == 6


def test_noise_around_the_target_never_flaps():
    # Two replicas at exactly their target (8 = 2 x 4) with +-3 of noise: a
    # run of high samples may add a replica once, but nothing ever goes back
    # and forth.
    for seed in range(5):
        rng = random.Random(seed)
        timeline = simulate(lambda t, rng=rng: 8.0 + rng.uniform(-3.0, 3.0), config(), 600, start=2)
        steps = changes(timeline)
        assert len(steps) <= 1, f"seed {seed}: {steps}"
        assert all(d is ScalingDirection.UP for _, _, d in steps)


def test_noise_below_the_target_makes_no_decision():
    for seed in range(5):
        rng = random.Random(seed)
        timeline = simulate(lambda t, rng=rng: 6.0 + rng.uniform(-3.0, 3.0), config(), 600, start=2)
        assert changes(timeline) == [], f"seed {seed}"


@settings(max_examples=50, deadline=None)
@given(
    replicas=st.integers(min_value=1, max_value=8),
    fractions=st.lists(st.floats(min_value=0.01, max_value=1.0), min_size=1, max_size=400),
)
def test_any_load_within_one_replica_of_capacity_keeps_the_count(replicas, fractions):
    # Load in ((n-1)*target, n*target] is exactly what n replicas are for.
    cfg = config()
    samples = iter(fractions)
    timeline = simulate(
        lambda t: (replicas - 1 + next(samples, fractions[-1])) * 4.0, cfg, len(fractions) * TICK_S, start=replicas
    )
    assert changes(timeline) == []


def test_demand_at_zero_replicas_scales_up_from_zero():
    # Proxies report requests they turned away for want of a replica as queued.
    timeline = simulate(lambda t: 0.0 if t < 10 else 3.0, config(min_replicas=0), 30, start=0)
    assert count_at(timeline, 9.5) == 0
    assert count_at(timeline, 30) >= 1
