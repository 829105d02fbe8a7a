"""Rollout transitions: when a traffic change starts a rollout, and how a step passes or fails.

Pure: every function takes the rollout, the request totals per backend
(summed over proxies, `controller.policies.request_totals`) and the wall clock, and
returns a new `Rollout` plus the checks it decided. The controller stores
the result in its checkpoint, publishes `Rollout.weights()` to the proxies
in place of the endpoint's configured traffic, and counts the checks. No
Ray, no clock, no I/O here.

A step is judged on the requests of the backends gaining weight since the
step began. It fails as soon as one of them has answered `min_requests`
(at least one) and breaks a threshold; it passes once `step_interval_s`
has passed and each has answered `min_requests` without breaking one.

A step with PromQL checks (`RolloutConfig.metrics`) is also judged on their
readings taken after it held (`due_queries` says which to take; the
controller's shell asks Prometheus): a value out of bounds fails it like a
broken threshold; a reading without a value (Prometheus unreachable, a bad
query) holds it with `Rollout.analysis_error` set, never passes it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from string import Template
from typing import Mapping

from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.rollout_config import MetricCheck, OnFailure, RolloutConfig
from vocabulary.control.request_stats import RequestStats
from vocabulary.control.rollouts import Check, CheckName, MetricQuery, MetricReading, Rollout, RolloutPhase, StepRecord

__all__ = ["Decision", "Readings", "begin", "on_config", "advance", "judge", "due_queries", "by_hand", "HAND_VERBS",
           "RETRY_S"]

Totals = Mapping[str, RequestStats]
# The newest reading of each (check, backend) of one endpoint's rollout.
Readings = Mapping[tuple[str, str], MetricReading]
_NONE = RequestStats()
# A reading without a value is asked again after this many seconds.
RETRY_S = 5.0


@dataclass(frozen=True)
class Decision:
    """A rollout after one look, and the checks decided in it (empty while a step holds)."""

    rollout: Rollout
    checks: tuple[Check, ...] = ()


def begin(
    endpoint: str, before: Mapping[str, float], target: Mapping[str, float], config: RolloutConfig,
    totals: Totals, now: float,
) -> Rollout:
    """A rollout from `before` to `target` at its first step (promoted at once when they are equal)."""
    phase = RolloutPhase.PROMOTED if dict(before) == dict(target) else RolloutPhase.STEPPING
    rollout = Rollout(
        endpoint=endpoint, before=dict(before), target=dict(target), config=config, phase=phase,
        step_started_at=now,
    )
    return rollout.model_copy(update={"baseline": _baseline(rollout, totals)})


def on_config(
    current: Rollout | None, live: Mapping[str, float] | None, config: EndpointConfig, totals: Totals, now: float
) -> Rollout | None:
    """The rollout an endpoint has after its config is set to `config`.

    None: the traffic applies at once (no [rollout], a new endpoint, or
    nothing to move). The same target again changes nothing, so an aborted
    commit is not retried; a newer target waits for the running step's end.
    """
    target = dict(config.traffic)
    if config.rollout is None or live is None:
        return None
    start = dict(live)
    if current is not None and current.phase is not RolloutPhase.PROMOTED:
        if current.target == target:
            return current.model_copy(update={"config": config.rollout, "next_target": None, "next_config": None})
        if current.phase is RolloutPhase.STEPPING:
            return current.model_copy(update={"next_target": target, "next_config": config.rollout})
        start = current.weights()
    return None if start == target else begin(config.name, start, target, config.rollout, totals, now)


def advance(rollout: Rollout, totals: Totals, now: float, readings: Readings | None = None) -> Decision:
    """One look at a rollout: replace it by a waiting newer target at a step
    boundary, fail it on a broken threshold or a PromQL check out of bounds,
    or pass the step when it has held and every PromQL check has a value."""
    if rollout.phase is not RolloutPhase.STEPPING:
        return Decision(rollout)
    held = now - rollout.step_started_at >= rollout.config.step_interval_s
    checks = judge(rollout.config, _measured(rollout, totals))
    if any(not c.passed and c.name is not CheckName.REQUESTS for c in checks):
        return Decision(_fail(rollout, checks), checks)
    if not held:
        return Decision(rollout)
    if rollout.next_target is not None:
        return Decision(_take_next(rollout, totals, now))
    if not all(c.passed for c in checks):
        return Decision(rollout)
    metric_checks, missing = _metric_checks(rollout, readings or {})
    if any(not c.passed for c in metric_checks):
        return Decision(_fail(rollout, checks + metric_checks), checks + metric_checks)
    if missing:
        return Decision(rollout.model_copy(update={"analysis_error": _first_error(rollout, readings or {})}))
    return Decision(_pass(rollout, checks + metric_checks, totals, now), checks + metric_checks)


def due_queries(rollout: Rollout, readings: Readings, now: float) -> tuple[MetricQuery, ...]:
    """The PromQL queries a rollout needs asked now: those of a held step
    without a reading since it held, or whose reading had no value `RETRY_S` ago."""
    if rollout.phase is not RolloutPhase.STEPPING or not rollout.config.metrics:
        return ()
    held_at = _held_at(rollout)
    if now < held_at:
        return ()
    due: list[MetricQuery] = []
    for check in rollout.config.metrics:
        for backend in rollout.gaining():
            reading = readings.get((check.name, backend))
            stale = reading is None or reading.at < held_at
            if stale or (reading is not None and reading.value is None and now - reading.at >= RETRY_S):
                due.append(_query(rollout, check, backend))
    return tuple(due)


def _query(rollout: Rollout, check: MetricCheck, backend: str) -> MetricQuery:
    interval = f"{max(1, math.ceil(rollout.config.step_interval_s))}s"
    promql = Template(check.query).safe_substitute(endpoint=rollout.endpoint, backend=backend, interval=interval)
    return MetricQuery(endpoint=rollout.endpoint, check=check.name, backend=backend, promql=promql)


def _held_at(rollout: Rollout) -> float:
    return rollout.step_started_at + rollout.config.step_interval_s


def _metric_checks(rollout: Rollout, readings: Readings) -> tuple[tuple[Check, ...], bool]:
    """The PromQL checks with a value read since the step held, and whether any lacks one."""
    held_at, checks, missing = _held_at(rollout), [], False
    for check in rollout.config.metrics:
        for backend in rollout.gaining():
            reading = readings.get((check.name, backend))
            if reading is None or reading.at < held_at or reading.value is None:
                missing = True
                continue
            checks.append(_metric_check(check, backend, reading.value))
    return tuple(checks), missing


def _metric_check(check: MetricCheck, backend: str, value: float) -> Check:
    passed = check.passes(value)
    below = check.min is not None and value < check.min
    bound = check.min if below or check.max is None else check.max
    return Check(
        name=CheckName.METRIC, metric=check.name, backend=backend, measured=round(value, 6),
        threshold=float(bound if bound is not None else 0.0), passed=passed,
    )


def _first_error(rollout: Rollout, readings: Readings) -> str | None:
    """Why the step's PromQL checks cannot be judged yet (None: waiting for a first answer)."""
    held_at = _held_at(rollout)
    for (check, backend), reading in sorted(readings.items()):
        if reading.error is not None and reading.at >= held_at:
            return f"metric check {check} for {backend}: {reading.error}"
    return None


def judge(config: RolloutConfig, measured: Mapping[str, RequestStats]) -> tuple[Check, ...]:
    """The checks of each backend over its step's requests. Thresholds are
    judged only once a backend has answered enough requests to judge."""
    checks: list[Check] = []
    for backend, stats in sorted(measured.items()):
        passed = stats.requests >= config.min_requests
        checks.append(_check(CheckName.REQUESTS, backend, stats.requests, config.min_requests, passed))
        if not passed or stats.requests == 0:
            continue
        ratio, most = stats.error_ratio(), config.max_error_ratio
        checks.append(_check(CheckName.ERROR_RATIO, backend, ratio, most, ratio <= most))
        if config.max_p99_latency_s is not None:
            p99, slowest = stats.quantile(0.99), config.max_p99_latency_s
            checks.append(_check(CheckName.P99_LATENCY, backend, p99, slowest, p99 <= slowest))
    return tuple(checks)


HAND_VERBS = ("promote", "abort")


def by_hand(rollout: Rollout | None, endpoint: str, verb: str, who: str) -> Rollout:
    """A running (stepping or paused) rollout promoted to its target at once, or aborted
    (traffic back where it was), by `who`; ValueError saying why not."""
    if verb not in HAND_VERBS:
        raise ValueError(f"{verb!r} is not promote or abort")
    if rollout is None:
        raise ValueError(f"endpoint {endpoint} has no rollout")
    if rollout.phase not in (RolloutPhase.STEPPING, RolloutPhase.PAUSED):
        raise ValueError(f"the rollout of endpoint {endpoint} is over ({rollout.phase.value})")
    phase = RolloutPhase.PROMOTED if verb == "promote" else RolloutPhase.ABORTED
    return rollout.model_copy(update={"phase": phase, "by_hand": who, "checks": (), "analysis_error": None,
                                      "next_target": None, "next_config": None})


def _check(name: CheckName, backend: str, measured: float, threshold: float, passed: bool) -> Check:
    return Check(name=name, backend=backend, measured=round(measured, 6), threshold=threshold, passed=passed)


def _fail(rollout: Rollout, checks: tuple[Check, ...]) -> Rollout:
    phase = RolloutPhase.ABORTED if rollout.config.on_failure is OnFailure.ROLLBACK else RolloutPhase.PAUSED
    return rollout.model_copy(update={"phase": phase, "checks": checks, "analysis_error": None})


def _pass(rollout: Rollout, checks: tuple[Check, ...], totals: Totals, now: float) -> Rollout:
    record = StepRecord(step=rollout.step, weights=rollout.weights(), checks=checks, at=now)
    decided = {"checks": checks, "analysis_error": None, "passed": (*rollout.passed, record)}
    if rollout.step + 1 >= len(rollout.config.steps):
        return rollout.model_copy(update={"phase": RolloutPhase.PROMOTED, **decided})
    moved = rollout.model_copy(update={"step": rollout.step + 1, "step_started_at": now, **decided})
    return moved.model_copy(update={"baseline": _baseline(moved, totals)})


def _take_next(rollout: Rollout, totals: Totals, now: float) -> Rollout:
    target = rollout.next_target or rollout.target
    return begin(rollout.endpoint, rollout.weights(), target, rollout.next_config or rollout.config, totals, now)


def _measured(rollout: Rollout, totals: Totals) -> dict[str, RequestStats]:
    """Each gaining backend's requests since its step began."""
    return {b: totals.get(b, _NONE).since(rollout.baseline.get(b, _NONE)) for b in rollout.gaining()}


def _baseline(rollout: Rollout, totals: Totals) -> dict[str, RequestStats]:
    return {backend: totals.get(backend, _NONE) for backend in rollout.gaining()}
