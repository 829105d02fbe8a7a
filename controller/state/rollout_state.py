"""Every endpoint's rollout, the request totals they are judged on, and the checks counted.

The controller's holder of rollouts, beside `EndpointState` (which keeps the
split git asked for). `on_endpoint` is called when an endpoint's config is
set, `record` with each proxy's request counts, `record_readings` with
Prometheus' answers to `due_queries`, `tick` on every control-loop tick;
`served` is what the proxies get: the endpoint's config with the rollout's
current weights in place of git's split. State crosses restarts
through `to_json`/`from_json` in the controller's checkpoint, so a step in
progress goes on where it was (PromQL readings are not kept: a restarted
controller asks again). Transitions are `controller.policies.rollouts`'; no
Ray, no clock (`now` is passed in, wall-clock seconds).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Mapping

from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.control.request_stats import RequestStats
from vocabulary.control.rollouts import CheckCount, MetricQuery, MetricReading, Rollout
from controller.policies.request_totals import RequestTotals
from controller.policies.rollouts import advance, by_hand, due_queries, on_config

__all__ = ["RolloutState"]

logger = logging.getLogger(__name__)


class RolloutState:
    def __init__(
        self,
        rollouts: Mapping[str, Rollout] | None = None,
        totals: RequestTotals | None = None,
        checks: Counter[tuple[str, str, str, str]] | None = None,
    ) -> None:
        self._rollouts: dict[str, Rollout] = dict(rollouts or {})
        self._totals = totals or RequestTotals()
        self._checks: Counter[tuple[str, str, str, str]] = checks or Counter()
        self._readings: dict[str, dict[tuple[str, str], MetricReading]] = {}
        self.dirty = False

    def on_endpoint(self, config: EndpointConfig, live: Mapping[str, float] | None, now: float) -> None:
        """`config` replaces the endpoint's config whose served split was `live` (None: a new endpoint)."""
        rollout = on_config(self._rollouts.get(config.name), live, config, self._totals.totals, now)
        self._set(config.name, rollout)

    def forget(self, endpoint: str) -> None:
        self._set(endpoint, None)

    def due_queries(self, now: float) -> tuple[MetricQuery, ...]:
        """The PromQL queries the running rollouts need asked now."""
        return tuple(
            query
            for name, rollout in sorted(self._rollouts.items())
            for query in due_queries(rollout, self._readings.get(name, {}), now)
        )

    def record_readings(self, endpoint: str, readings: list[MetricReading]) -> None:
        """Prometheus' answers for `endpoint`'s rollout; each replaces the older one of its check and backend."""
        if endpoint not in self._rollouts:
            return
        held = self._readings.setdefault(endpoint, {})
        for reading in readings:
            held[(reading.check, reading.backend)] = reading

    def served(self, config: EndpointConfig) -> EndpointConfig:
        """The config the proxies serve: git's, with the rollout's weights and its
        1-based step (`rollout_step`, for traces and capture) while one runs."""
        rollout = self._rollouts.get(config.name)
        if rollout is None:
            return config
        # Backends of git's split stay in at weight 0: proxies keep their replicas
        # at hand, and the endpoint's goal sees every backend it names served.
        weights = {**{backend: 0.0 for backend in config.traffic}, **rollout.weights()}
        step = rollout.display_step()
        if weights == config.traffic and step == config.rollout_step:
            return config
        return config.model_copy(update={"traffic": weights, "rollout_step": step})

    def record(self, proxy: str, requests: Mapping[str, Any]) -> None:
        """A proxy's cumulative counts (`RequestStats` as JSON) from its load report."""
        report = {backend: RequestStats.model_validate(stats) for backend, stats in requests.items()}
        self._totals = self._totals.absorb(proxy, report)

    def tick(self, now: float) -> list[str]:
        """Advance every rollout; the endpoints whose served weights or step changed."""
        moved: list[str] = []
        for name, rollout in list(self._rollouts.items()):
            decision = advance(rollout, self._totals.totals, now, self._readings.get(name))
            for check in decision.checks:
                result = "pass" if check.passed else "fail"
                self._checks[(name, check.backend, check.label(), result)] += 1
            if decision.rollout == rollout:
                continue
            if decision.rollout.phase != rollout.phase or decision.rollout.step != rollout.step:
                logger.info("rollout %s", decision.rollout.message())
            moved_on = decision.rollout.display_step() != rollout.display_step()
            if moved_on or decision.rollout.weights() != rollout.weights():
                moved.append(name)
            self._set(name, decision.rollout)
        return moved

    def decide(self, endpoint: str, verb: str, who: str) -> str:
        """Promote or abort `endpoint`'s running rollout by hand; its message (ValueError: why not)."""
        decided = by_hand(self._rollouts.get(endpoint), endpoint, verb, who)
        logger.info("rollout %s", decided.message())
        self._set(endpoint, decided)
        return decided.message()

    def totals(self) -> dict[str, RequestStats]:
        """Every backend's requests counted so far, summed over proxies."""
        return dict(self._totals.totals)

    def rollouts(self) -> dict[str, Rollout]:
        return dict(self._rollouts)

    def check_counts(self) -> tuple[CheckCount, ...]:
        return tuple(
            CheckCount(endpoint=e, backend=b, check=c, result=r, count=n)
            for (e, b, c, r), n in sorted(self._checks.items())
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "rollouts": {name: rollout.model_dump(mode="json") for name, rollout in self._rollouts.items()},
            "totals": self._totals.model_dump(mode="json"),
            "checks": [count.model_dump(mode="json") for count in self.check_counts()],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> RolloutState:
        data = data or {}
        counts = (CheckCount.model_validate(item) for item in data.get("checks", []))
        return cls(
            {name: Rollout.model_validate(item) for name, item in data.get("rollouts", {}).items()},
            RequestTotals.model_validate(data.get("totals", {})),
            Counter({(c.endpoint, c.backend, c.check, c.result): c.count for c in counts}),
        )

    def _set(self, endpoint: str, rollout: Rollout | None) -> None:
        if self._rollouts.get(endpoint) == rollout:
            return
        if rollout is None:
            # Readings older than a step's hold are ignored, so only a gone rollout drops them.
            self._readings.pop(endpoint, None)
            del self._rollouts[endpoint]
        else:
            self._rollouts[endpoint] = rollout
        self.dirty = True
