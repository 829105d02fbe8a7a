"""A rollout as a value: where an endpoint's traffic is on its way to git's split.

The controller owns the transitions (`controller.policies.rollouts`), keeps a
`Rollout` per endpoint in its checkpoint (so steps survive a restart) and
reports it in `ClusterStatus`; the agent reads it for history, status and
metrics. Plain values, no I/O.

Weights at step `i` move each backend from its weight before the rollout
toward its target by the share `steps[i]`, so every step's weights still sum
to 1. The backends *gaining* weight are the ones a step's checks judge.
"""

from __future__ import annotations

import enum
from typing import Mapping

from pydantic import BaseModel, ConfigDict, Field

from vocabulary.spec.rollout_config import RolloutConfig
from vocabulary.control.request_stats import RequestStats

__all__ = ["RolloutPhase", "CheckName", "Check", "CheckCount", "MetricQuery", "MetricReading", "StepRecord", "Rollout",
           "interpolate"]

Weights = dict[str, float]


class RolloutPhase(str, enum.Enum):
    STEPPING = "stepping"  # a step holds; its checks run
    PAUSED = "paused"  # a check failed with on_failure = pause: the step holds, no further steps
    ABORTED = "aborted"  # a check failed with on_failure = rollback: traffic is back at `before`
    PROMOTED = "promoted"  # every step passed: traffic is at `target`


class CheckName(str, enum.Enum):
    REQUESTS = "requests"  # at least min_requests (measured >= threshold)
    ERROR_RATIO = "error_ratio"  # 5xx share at most max_error_ratio
    P99_LATENCY = "p99_latency"  # p99 at most max_p99_latency_s
    METRIC = "metric"  # a [[rollout.metrics]] PromQL check, named by `Check.metric`


class Check(BaseModel):
    """One check of one backend over one step, with what was measured."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: CheckName
    backend: str
    measured: float
    threshold: float
    passed: bool
    metric: str | None = None  # the PromQL check's name, for CheckName.METRIC

    def label(self) -> str:
        """The `check` label of `gitops_rollout_checks_total`: a PromQL check goes by its own name."""
        return self.metric or self.name.value

    def describe(self) -> str:
        if self.name is CheckName.METRIC:
            if self.passed:
                return f"{self.backend}: {self.metric} {self.measured:g} within bounds"
            relation = ">" if self.measured > self.threshold else "<"
            return f"{self.backend}: {self.metric} {self.measured:g} {relation} {self.threshold:g}"
        if self.name is CheckName.REQUESTS:
            relation = ">=" if self.passed else "<"
            return f"{self.backend}: {self.measured:g} requests {relation} {self.threshold:g}"
        relation = "<=" if self.passed else ">"
        return f"{self.backend}: {self.name.value} {self.measured:g} {relation} {self.threshold:g}"


class CheckCount(BaseModel):
    """How often a check of one endpoint's backend passed or failed (`gitops_rollout_checks_total`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    endpoint: str
    backend: str
    check: str  # `Check.label()`
    result: str  # pass | fail
    count: int = Field(ge=0)


class MetricQuery(BaseModel):
    """One PromQL query a rollout's step needs answered: a check for one gaining backend."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    endpoint: str
    check: str
    backend: str
    promql: str  # with $endpoint, $backend and $interval filled in


class MetricReading(BaseModel):
    """What Prometheus answered to a `MetricQuery` at wall-clock `at`: a value, or why there is none."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    check: str
    backend: str
    at: float
    value: float | None = None
    error: str | None = None  # Prometheus unreachable, a query error, or no single number


def interpolate(before: Mapping[str, float], target: Mapping[str, float], share: float) -> Weights:
    """Weights `share` of the way from `before` to `target`; backends at 0 are left out."""
    names = sorted(set(before) | set(target))
    weights = {
        name: before.get(name, 0.0) + share * (target.get(name, 0.0) - before.get(name, 0.0)) for name in names
    }
    return {name: round(weight, 12) for name, weight in weights.items() if weight > 1e-12}


class StepRecord(BaseModel):
    """A step that passed: its weights and the checks it passed on, at wall-clock `at`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    step: int = Field(ge=0)
    weights: Weights
    checks: tuple[Check, ...]
    at: float

    def describe(self, endpoint: str, steps: int) -> str:
        split = ", ".join(f"{backend} {weight:.0%}" for backend, weight in sorted(self.weights.items()))
        checks = "; ".join(check.describe() for check in self.checks) or "no checks"
        return f"endpoint {endpoint}: step {self.step + 1}/{steps} passed at {split}: {checks}"


class Rollout(BaseModel):
    """One endpoint's rollout. `step` indexes `config.steps`; `baseline` holds
    the gaining backends' request totals when the step began, so a step is
    judged on its own requests. `next_target` is a newer split waiting for
    the next step boundary."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    endpoint: str
    before: Weights
    target: Weights
    config: RolloutConfig
    phase: RolloutPhase = RolloutPhase.STEPPING
    step: int = Field(default=0, ge=0)
    step_started_at: float
    baseline: dict[str, RequestStats] = Field(default_factory=dict)
    checks: tuple[Check, ...] = ()  # those of the last decision (a step passed or failed)
    next_target: Weights | None = None
    next_config: RolloutConfig | None = None
    # Why the step's PromQL checks cannot be judged (Prometheus unreachable, a
    # bad query): the step holds, visibly, rather than passing unjudged.
    analysis_error: str | None = None
    passed: tuple[StepRecord, ...] = ()  # the steps passed so far, oldest first
    by_hand: str | None = None  # who promoted or aborted it by hand (`gitops promote|abort`, the status page)

    def weights(self) -> Weights:
        """The split the proxies serve now."""
        if self.phase is RolloutPhase.ABORTED:
            return dict(self.before)
        if self.phase is RolloutPhase.PROMOTED:
            return dict(self.target)
        return interpolate(self.before, self.target, self.config.steps[self.step])

    def gaining(self) -> tuple[str, ...]:
        """Backends whose target weight is above their weight before the rollout."""
        return tuple(sorted(b for b, w in self.target.items() if w > self.before.get(b, 0.0) + 1e-12))

    def failed(self) -> tuple[Check, ...]:
        return tuple(check for check in self.checks if not check.passed and check.name is not CheckName.REQUESTS)

    def display_step(self) -> int:
        """1-based step for people and `gitops_rollout_step`; 0 once the rollout is over."""
        return 0 if self.phase in (RolloutPhase.ABORTED, RolloutPhase.PROMOTED) else self.step + 1

    def message(self) -> str:
        steps = len(self.config.steps)
        if self.phase is RolloutPhase.PROMOTED:
            if self.by_hand is not None:
                return f"endpoint {self.endpoint}: promoted by hand by {self.by_hand}, its steps skipped"
            return f"endpoint {self.endpoint}: promoted through {steps} step(s)"
        if self.phase is RolloutPhase.STEPPING:
            share = self.config.steps[self.step]
            text = f"endpoint {self.endpoint}: step {self.step + 1}/{steps} ({share:.0%} of the change)"
            return text if self.analysis_error is None else f"{text}, held: {self.analysis_error}"
        failures = "; ".join(check.describe() for check in self.failed())
        if self.phase is RolloutPhase.PAUSED:
            return f"endpoint {self.endpoint}: paused at step {self.step + 1}/{steps}: {failures}"
        if self.by_hand is not None:
            return f"endpoint {self.endpoint}: aborted by hand by {self.by_hand} at step {self.step + 1}/{steps}, traffic back"
        return f"endpoint {self.endpoint}: aborted at step {self.step + 1}/{steps}, traffic back: {failures}"
