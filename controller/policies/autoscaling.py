"""Autoscaling: how many replicas an autoscaled backend should run.

Owns, all pure (no Ray, no clock: `now` is always passed in):
- `LoadReports`: the latest (ongoing, queued) figures each proxy reported per
  backend. A report older than its TTL counts as zero, so a dead proxy's load
  does not linger.
- `LoadWindow`: a backend's recent total load, one `LoadSample` per controller
  tick (at most every `SAMPLE_INTERVAL_S`), each tagged with the target and
  RUNNING replica counts of that moment.
- `decide()`: the policy, `(window, current, config, now) -> ScalingDecision`.
- `initial_replicas()`: the count for a new backend or after git changes its
  bounds.
- `Autoscaler`: the controller's memory for all of the above (reports, one
  window per backend, decisions counted by direction), so the controller's
  tick makes one call.

Not here: carrying a decision out (the controller's backend state owns the
target count; scale-down drains like any stop), and exporting metrics.

The policy, and why:
- Demand is ongoing + queued requests summed over proxies; the wanted count
  is `ceil(demand / target_ongoing_requests)`, clamped to [min, max]. With
  `target_reported_load`, the load replicas report
  (`ray_gitops.serving.report_load`, summed over the replicas; the proxy that saw the most of it
  counts, since every proxy sees the same replicas) is demand too, scaled so
  that it wants `ceil(reported / target_reported_load)` replicas: the
  larger of the two demands counts, so queued requests still scale a
  backend up from zero.
- A level is *held* over a delay when at least 90% of the samples in that
  delay were on its side; the 10% lets the gaps between one busy client's
  requests pass without restarting the clock. Scale up to the level the load
  held above for `upscale_delay_s`; scale down to the level it held below
  for `downscale_delay_s`. So a burst or a dip that lasts less than 90% of
  the delay changes nothing, and noise around the target does not flap:
  going up needs load above the current capacity, going down needs it below
  the capacity of one replica fewer, and the band between is a whole replica
  wide (see tests/pure/test_autoscaling_curves.py).
- Only samples taken since the count last changed count, so every step waits
  its own delay and judges load against the capacity it actually had. An
  upscale also waits until the previous step's replicas run: while they
  start, queued requests pile up and would overstate what is needed. A
  scale-down never waits for replicas that are not running (they may never
  start).
- One step grows by at most 100% or 4 replicas, whichever is more (the
  Kubernetes HPA default), because queued demand read while capacity is short
  overstates what is needed; the next step follows once the step's replicas
  run and the load held for one more delay.
  Scale-down is not limited per step: its delay already demands that the low
  load held.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from vocabulary.spec.backends import AutoscalingConfig

__all__ = [
    "Autoscaler",
    "BackendLoad",
    "LoadReports",
    "LoadSample",
    "LoadWindow",
    "ScalingDecision",
    "ScalingDirection",
    "REPORT_TTL_S",
    "SAMPLE_INTERVAL_S",
    "SUSTAINED_SHARE",
    "decide",
    "horizon_s",
    "initial_replicas",
    "upscale_limit",
    "wanted_replicas",
]

# Proxies report several times a second while they have load; a report that
# has not been refreshed for this long belongs to a proxy that is gone.
REPORT_TTL_S = 2.0
# Share of a delay's samples that must agree before a level counts as held.
SUSTAINED_SHARE = 0.9
# Proxies report every half second or so: sampling much faster than that
# only repeats figures and makes each tick's window longer to scan.
SAMPLE_INTERVAL_S = 0.25
# Guards ceil() against float error: 8.000000001 / 4 must still want 2.
_EPSILON = 1e-9

# (ongoing, queued) for one backend, as a proxy reports it.
BackendLoad = tuple[float, float]


class ScalingDirection(str, enum.Enum):
    UP = "up"
    DOWN = "down"
    NONE = "none"


@dataclass(frozen=True)
class ScalingDecision:
    """What the policy wants now; `reason` is a sentence for logs and status."""

    backend: str
    current: int
    desired: int
    direction: ScalingDirection
    reason: str

    @property
    def changed(self) -> bool:
        return self.direction is not ScalingDirection.NONE


@dataclass(frozen=True)
class LoadSample:
    """A backend's total load at `at`, while `replicas` was its target count
    and `running` of its replicas were RUNNING."""

    at: float
    ongoing: float
    queued: float
    replicas: int
    running: int = -1  # -1: unknown, taken as `replicas`
    # Reported load as requests: reported × target_ongoing_requests / target_reported_load.
    reported_demand: float = 0.0

    @property
    def demand(self) -> float:
        return max(self.ongoing + self.queued, self.reported_demand)


# --- reports from proxies -----------------------------------------------------


@dataclass(frozen=True)
class _ProxyReport:
    at: float
    loads: Mapping[str, BackendLoad]
    reported: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class LoadReports:
    """The latest report of each proxy; a new report replaces the proxy's last.

    A backend missing from a proxy's report has no load there, which lets a
    proxy stay silent once everything it carries is idle.
    """

    by_proxy: Mapping[str, _ProxyReport] = field(default_factory=dict)

    def with_report(
        self, proxy_id: str, loads: Mapping[str, BackendLoad], now: float,
        reported: Mapping[str, float] | None = None,
    ) -> LoadReports:
        merged = dict(self.by_proxy)
        merged[proxy_id] = _ProxyReport(at=now, loads=dict(loads), reported=dict(reported or {}))
        return LoadReports(by_proxy=merged)

    def reported(self, backend: str, now: float, ttl_s: float = REPORT_TTL_S) -> float:
        """The replicas' reported load for `backend`: the largest sum a fresh proxy saw
        (every proxy sees the same replicas, some of them not yet)."""
        return max(
            (r.reported.get(backend, 0.0) for r in self.by_proxy.values() if now - r.at <= ttl_s), default=0.0
        )

    def without_expired(self, now: float, ttl_s: float = REPORT_TTL_S) -> LoadReports:
        fresh = {p: r for p, r in self.by_proxy.items() if now - r.at <= ttl_s}
        return LoadReports(by_proxy=fresh)

    def total(self, backend: str, now: float, ttl_s: float = REPORT_TTL_S) -> BackendLoad:
        """(ongoing, queued) for `backend` summed over proxies with fresh reports."""
        ongoing = queued = 0.0
        for report in self.by_proxy.values():
            if now - report.at > ttl_s:
                continue
            backend_ongoing, backend_queued = report.loads.get(backend, (0.0, 0.0))
            ongoing += backend_ongoing
            queued += backend_queued
        return (ongoing, queued)


# --- the window ----------------------------------------------------------------


@dataclass(frozen=True)
class LoadWindow:
    """A backend's samples, oldest first, covering at least the last `horizon_s`."""

    samples: tuple[LoadSample, ...] = ()

    def observe(self, sample: LoadSample, horizon_s: float) -> LoadWindow:
        """Append `sample`; drop what no delay can look at any more.

        The newest sample at or before the horizon is kept, so the window can
        still prove that it covers the whole horizon.
        """
        samples = (*self.samples, sample)
        cutoff = sample.at - horizon_s
        first = 0
        while first + 1 < len(samples) and samples[first + 1].at <= cutoff:
            first += 1
        return LoadWindow(samples=samples[first:])

    def since_count(self, replicas: int) -> tuple[LoadSample, ...]:
        """The trailing samples taken while the target count was `replicas`."""
        start = len(self.samples)
        while start > 0 and self.samples[start - 1].replicas == replicas:
            start -= 1
        return self.samples[start:]

    def since_running(self, replicas: int) -> tuple[LoadSample, ...]:
        """The trailing samples taken while `replicas` was the target and all of them ran."""
        settled = self.since_count(replicas)
        start = len(settled)
        while start > 0 and _all_running(settled[start - 1]):
            start -= 1
        return settled[start:]


def _all_running(sample: LoadSample) -> bool:
    return sample.running < 0 or sample.running >= sample.replicas


def horizon_s(config: AutoscalingConfig) -> float:
    return max(config.upscale_delay_s, config.downscale_delay_s)


# --- the policy -----------------------------------------------------------------


def wanted_replicas(demand: float, config: AutoscalingConfig) -> int:
    """Replicas that keep `demand` at or under the target per replica, within bounds."""
    raw = math.ceil(demand / config.target_ongoing_requests - _EPSILON)
    return _clamp(raw, config)


def upscale_limit(current: int) -> int:
    """The most replicas one upscale step may reach from `current`."""
    return max(current * 2, current + 4)


def initial_replicas(config: AutoscalingConfig, previous: int | None = None) -> int:
    """The count to start with: `previous` kept if within bounds, else min_replicas.

    Git owns the bounds, the controller owns the count: re-applying a backend
    or changing its bounds keeps the count the autoscaler chose, clamped.
    """
    if previous is None:
        return config.min_replicas
    return _clamp(previous, config)


def decide(
    window: LoadWindow, current: int, config: AutoscalingConfig, now: float, backend: str = ""
) -> ScalingDecision:
    """The policy: scale to the load held over the delay (see the module docstring)."""
    bounded = _clamp(current, config)
    if bounded != current:
        return _decision(backend, current, bounded, "the count is outside [min_replicas, max_replicas]")
    settled = window.since_count(current)
    up = _held_level(window.since_running(current), config.upscale_delay_s, now, low=True)
    if up is not None:
        wanted = wanted_replicas(up, config)
        if wanted > current:
            desired = min(wanted, upscale_limit(current))
            capped = " (capped for this step)" if desired < wanted else ""
            return _decision(
                backend, current, desired,
                f"demand held above {up:g} for {config.upscale_delay_s:g}s wants {wanted}{capped}",
            )
    down = _held_level(settled, config.downscale_delay_s, now, low=False)
    if down is not None:
        wanted = wanted_replicas(down, config)
        if wanted < current:
            return _decision(
                backend, current, wanted,
                f"demand held below {down:g} for {config.downscale_delay_s:g}s wants {wanted}",
            )
    return _decision(backend, current, current, "load within the current capacity")


def _held_level(
    settled: Sequence[LoadSample], delay_s: float, now: float, low: bool
) -> float | None:
    """The demand level held over the last `delay_s`, or None if not yet known.

    `low=True`: the level demand stayed at or above; `low=False`: at or below.
    None while the samples since the last change do not cover the delay.
    """
    if not settled or settled[0].at > now - delay_s:
        return None
    start = now - delay_s
    recent = [s.demand for s in settled if s.at >= start] or [settled[-1].demand]
    recent.sort()
    tolerated = math.floor((1.0 - SUSTAINED_SHARE) * len(recent) + _EPSILON)
    return recent[tolerated] if low else recent[len(recent) - 1 - tolerated]


def _clamp(count: int, config: AutoscalingConfig) -> int:
    return max(config.min_replicas, min(config.max_replicas, count))


def _decision(backend: str, current: int, desired: int, reason: str) -> ScalingDecision:
    if desired > current:
        direction = ScalingDirection.UP
    elif desired < current:
        direction = ScalingDirection.DOWN
    else:
        direction = ScalingDirection.NONE
    return ScalingDecision(backend, current, desired, direction, reason)


# --- the controller's memory -------------------------------------------------------


class Autoscaler:
    """Everything the controller remembers for autoscaling, and nothing else.

    The controller calls `record_report` from its `report_load` method and
    `tick` once per control-loop tick; it carries out each changed decision
    through its own owner of target replicas. Held in memory only: after a
    controller restart the windows refill within one delay.
    """

    def __init__(
        self, report_ttl_s: float = REPORT_TTL_S, sample_interval_s: float = SAMPLE_INTERVAL_S
    ) -> None:
        self._report_ttl_s = report_ttl_s
        self._sample_interval_s = sample_interval_s
        self._reports = LoadReports()
        self._windows: dict[str, LoadWindow] = {}
        self._decisions: dict[str, dict[ScalingDirection, int]] = {}

    def record_report(
        self, proxy_id: str, loads: Mapping[str, BackendLoad], now: float,
        reported: Mapping[str, float] | None = None,
    ) -> None:
        self._reports = self._reports.with_report(proxy_id, loads, now, reported)

    def tick(
        self,
        backends: Mapping[str, tuple[int, AutoscalingConfig]],
        now: float,
        running: Mapping[str, int] | None = None,
    ) -> dict[str, ScalingDecision]:
        """Observe and decide for each autoscaled backend: name -> (current, config).

        `running`: RUNNING replicas per backend; a backend missing from it is
        taken to run its whole target.

        Backends no longer listed are forgotten. Returns every backend's
        decision; the caller acts on those whose `changed` is True.
        """
        self._reports = self._reports.without_expired(now, self._report_ttl_s)
        for gone in set(self._windows) - set(backends):
            self.forget(gone)
        return {
            name: self._tick_one(name, current, (running or {}).get(name, -1), config, now)
            for name, (current, config) in backends.items()
        }

    def load(self, backend: str, now: float) -> BackendLoad:
        """The backend's current (ongoing, queued) over all proxies."""
        return self._reports.total(backend, now, self._report_ttl_s)

    def decisions(self, backend: str) -> dict[str, int]:
        """Scaling decisions taken for `backend` so far: {"up": n, "down": n}."""
        counts = self._decisions.get(backend, {})
        return {d.value: counts.get(d, 0) for d in (ScalingDirection.UP, ScalingDirection.DOWN)}

    def forget(self, backend: str) -> None:
        self._windows.pop(backend, None)
        self._decisions.pop(backend, None)

    def _tick_one(
        self, name: str, current: int, running: int, config: AutoscalingConfig, now: float
    ) -> ScalingDecision:
        window = self._windows.get(name, LoadWindow())
        last = window.samples[-1] if window.samples else None
        fleet_changed = last is not None and (last.replicas, last.running) != (current, running)
        if last is None or now - last.at >= self._sample_interval_s or fleet_changed:
            ongoing, queued = self.load(name, now)
            reported_demand = 0.0
            if config.target_reported_load is not None:
                reported = self._reports.reported(name, now, self._report_ttl_s)
                reported_demand = reported * config.target_ongoing_requests / config.target_reported_load
            sample = LoadSample(
                at=now, ongoing=ongoing, queued=queued, replicas=current, running=running,
                reported_demand=reported_demand,
            )
            window = window.observe(sample, horizon_s(config))
            self._windows[name] = window
        decision = decide(window, current, config, now, backend=name)
        if decision.changed:
            counts = self._decisions.setdefault(name, {})
            counts[decision.direction] = counts.get(decision.direction, 0) + 1
        return decision
