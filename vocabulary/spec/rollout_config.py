"""An endpoint's `[rollout]` table: steps, their checks, what a failed check does.

`RolloutConfig` and its PromQL `MetricCheck`s; a running rollout, as the
controller keeps it, is `vocabulary.control.rollouts`. Values only.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, Sequence

from pydantic import AfterValidator, Field, model_validator

from vocabulary.spec.base import Value

__all__ = [
    "OnFailure",
    "MetricCheck",
    "bounded_check",
    "RolloutConfig",
]


class OnFailure(str, enum.Enum):
    """What a rollout does when a step's check fails."""

    ROLLBACK = "rollback"  # traffic back to the split before the rollout
    PAUSE = "pause"  # hold the current step


def _steps_shape(steps: Sequence[float]) -> Sequence[float]:
    if not steps:
        raise ValueError("must list at least one step")
    outside = [step for step in steps if not 0 < step <= 1]
    if outside:
        raise ValueError(f"each step must be in (0, 1] (got {outside[0]:g})")
    if any(later <= earlier for earlier, later in zip(steps, steps[1:])):
        raise ValueError("must be strictly increasing")
    if steps[-1] != 1.0:
        raise ValueError(f"must end at 1.0, the split in git (ends at {steps[-1]:g})")
    return steps


_CHECK_NAME = r"[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?"


def bounded_check(check: Any) -> Any:
    """A metric check's bounds rule; the spec table (`gitops.specs.models`) applies it too."""
    if check.min is None and check.max is None:
        raise ValueError("needs min or max (or both)")
    if check.min is not None and check.max is not None and check.min > check.max:
        raise ValueError(f"min ({check.min:g}) is above max ({check.max:g})")
    return check


class MetricCheck(Value):
    """A PromQL query judged at the end of each rollout step, once per backend gaining weight."""

    name: str = Field(
        pattern=_CHECK_NAME,
        description="Names the check in status, history and the check label of gitops_rollout_checks_total.",
    )
    query: str = Field(
        min_length=1,
        description="PromQL evaluated at the agent's --prometheus-url; it must return one number. "
        "$endpoint, $backend (the backend gaining weight) and $interval (the step interval, e.g. 30s) are filled in.",
    )
    min: float | None = Field(
        default=None, examples=[0.99], description="Lowest value that passes; none: no lower bound."
    )
    max: float | None = Field(default=None, description="Highest value that passes; none: no upper bound.")

    _bounded = model_validator(mode="after")(bounded_check)

    def passes(self, value: float) -> bool:
        return (self.min is None or value >= self.min) and (self.max is None or value <= self.max)


def _distinct_names(checks: Sequence[MetricCheck]) -> Sequence[MetricCheck]:
    names = [check.name for check in checks]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"check names must differ ('{twice[0]}' is used twice)")
    return checks


class RolloutConfig(Value):
    """How traffic moves from the live split to the split in git, and when a step may pass."""

    steps: Annotated[tuple[float, ...], AfterValidator(_steps_shape)] = Field(
        default=(0.1, 0.5, 1.0),
        description="Share of the change applied at each step: strictly increasing, in (0, 1], ending at 1.0.",
    )
    step_interval_s: float = Field(default=30.0, gt=0, description="Seconds each step must hold before it passes.")
    min_requests: int = Field(
        default=20, ge=0, description="Requests each backend gaining weight must answer in a step before it passes."
    )
    max_error_ratio: float = Field(
        default=0.01, ge=0, le=1, description="Highest share of 5xx answers of a backend gaining weight."
    )
    max_p99_latency_s: float | None = Field(
        default=None, gt=0, description="Highest p99 latency of a backend gaining weight; none: not checked."
    )
    on_failure: OnFailure = Field(
        default=OnFailure.ROLLBACK,
        description="rollback: traffic back to the split before the rollout; pause: hold the current step.",
    )
    metrics: Annotated[tuple[MetricCheck, ...], AfterValidator(_distinct_names)] = Field(
        default=(),
        description="PromQL checks ([[endpoints.NAME.rollout.metrics]]) judged at the end of each step "
        "against the agent's --prometheus-url, besides the proxies' own counts.",
    )
