"""Rollout transitions: when a traffic change starts a rollout, and how a step passes or fails.

Pure: every function takes the rollout, the request totals per backend
(summed over proxies, `controller.request_totals`) and the wall clock, and
returns a new `Rollout` plus the checks it decided. The controller stores
the result in its checkpoint, publishes `Rollout.weights()` to the proxies
in place of the endpoint's configured traffic, and counts the checks. No
Ray, no clock, no I/O here.

A step is judged on the requests of the backends gaining weight since the
step began. It fails as soon as one of them has answered `min_requests`
(at least one) and breaks a threshold; it passes once `step_interval_s`
has passed and each has answered `min_requests` without breaking one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from vocabulary.configs import EndpointConfig, OnFailure, RolloutConfig
from vocabulary.request_stats import RequestStats
from vocabulary.rollouts import Check, CheckName, Rollout, RolloutPhase

__all__ = ["Decision", "begin", "on_config", "advance", "judge"]

Totals = Mapping[str, RequestStats]
_NONE = RequestStats()


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


def advance(rollout: Rollout, totals: Totals, now: float) -> Decision:
    """One look at a rollout: replace it by a waiting newer target at a step
    boundary, fail it on a broken threshold, or pass the step when it has held."""
    if rollout.phase is not RolloutPhase.STEPPING:
        return Decision(rollout)
    held = now - rollout.step_started_at >= rollout.config.step_interval_s
    checks = judge(rollout.config, _measured(rollout, totals))
    broken = tuple(c for c in checks if not c.passed and c.name is not CheckName.REQUESTS)
    if broken:
        return Decision(_fail(rollout, checks), checks)
    if held and rollout.next_target is not None:
        return Decision(_take_next(rollout, totals, now))
    if held and all(c.passed for c in checks):
        return Decision(_pass(rollout, checks, totals, now), checks)
    return Decision(rollout)


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


def _check(name: CheckName, backend: str, measured: float, threshold: float, passed: bool) -> Check:
    return Check(name=name, backend=backend, measured=round(measured, 6), threshold=threshold, passed=passed)


def _fail(rollout: Rollout, checks: tuple[Check, ...]) -> Rollout:
    phase = RolloutPhase.ABORTED if rollout.config.on_failure is OnFailure.ROLLBACK else RolloutPhase.PAUSED
    return rollout.model_copy(update={"phase": phase, "checks": checks})


def _pass(rollout: Rollout, checks: tuple[Check, ...], totals: Totals, now: float) -> Rollout:
    if rollout.step + 1 >= len(rollout.config.steps):
        return rollout.model_copy(update={"phase": RolloutPhase.PROMOTED, "checks": checks})
    moved = rollout.model_copy(update={"step": rollout.step + 1, "step_started_at": now, "checks": checks})
    return moved.model_copy(update={"baseline": _baseline(moved, totals)})


def _take_next(rollout: Rollout, totals: Totals, now: float) -> Rollout:
    target = rollout.next_target or rollout.target
    return begin(rollout.endpoint, rollout.weights(), target, rollout.next_config or rollout.config, totals, now)


def _measured(rollout: Rollout, totals: Totals) -> dict[str, RequestStats]:
    """Each gaining backend's requests since its step began."""
    return {b: totals.get(b, _NONE).since(rollout.baseline.get(b, _NONE)) for b in rollout.gaining()}


def _baseline(rollout: Rollout, totals: Totals) -> dict[str, RequestStats]:
    return {backend: totals.get(backend, _NONE) for backend in rollout.gaining()}
