"""Outlier ejection (`proxy.pool.outliers`) and the `[outliers]` table's ranges."""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from proxy.pool.outliers import OutlierDetector, ejections_allowed
from vocabulary.spec.traffic_policy import OutliersConfig

THREE = ("r-1", "r-2", "r-3")


def test_errors_in_a_row_eject_a_replica_and_a_success_between_them_starts_the_count_again() -> None:
    config = OutliersConfig(consecutive_errors=3, success_rate_stdev=0, base_ejection_s=30)
    detector = OutlierDetector()
    for failed in (True, True, False, True, True):
        assert detector.answered("r-1", failed, 1.0, config, THREE) == []
    [ejection] = detector.answered("r-1", True, 2.0, config, THREE)
    assert (ejection.replica_id, ejection.count, ejection.until) == ("r-1", 1, 32.0)
    assert ejection.message(2.0) == "replica r-1 ejected: 3 consecutive errors, back in 30 s"
    assert set(detector.ejected(31.9)) == {"r-1"}


def test_an_ejection_ends_after_base_time_times_its_count_and_the_replica_starts_over() -> None:
    config = OutliersConfig(consecutive_errors=2, success_rate_stdev=0, base_ejection_s=10, replace_after=0)
    detector = OutlierDetector()
    now = 0.0
    lasted = []
    for _ in range(3):
        detector.answered("r-1", True, now, config, THREE)
        [ejection] = detector.answered("r-1", True, now, config, THREE)
        lasted.append(ejection.until - now)
        now = ejection.until
        assert detector.ejected(now) == {}, "over at its end"
        # Its errors in a row were forgotten: one more error does not eject it again.
        assert detector.answered("r-1", True, now, config, THREE) == []
        detector.answered("r-1", False, now, config, THREE)
        now += 1
    assert lasted == [10.0, 20.0, 30.0]
    assert detector.ejections == 3


def test_answers_while_ejected_do_not_count() -> None:
    config = OutliersConfig(consecutive_errors=2, success_rate_stdev=0, base_ejection_s=10)
    detector = OutlierDetector()
    detector.answered("r-1", True, 0.0, config, THREE)
    assert detector.answered("r-1", True, 0.0, config, THREE)
    # Calls that were in flight when it was ejected end later: no second ejection.
    assert detector.answered("r-1", True, 1.0, config, THREE) == []
    assert detector.answered("r-1", True, 1.0, config, THREE) == []
    assert detector.ejections == 1


@pytest.mark.parametrize("replicas, percent, allowed", [
    (1, 100, 0),  # never the last replica
    (2, 10, 1),  # at least one when the share is above 0
    (2, 100, 1),
    (3, 50, 1),
    (10, 10, 1),
    (10, 35, 3),
    (10, 100, 9),
    (10, 0, 0),
])
def test_the_share_ejected_at_once_is_bounded_and_one_replica_stays(replicas: int, percent: float, allowed: int) -> None:
    assert ejections_allowed(replicas, percent) == allowed


def test_a_backend_failing_as_a_whole_keeps_replicas_routable() -> None:
    config = OutliersConfig(consecutive_errors=1, success_rate_stdev=0, max_ejection_percent=50)
    members = [f"r-{n}" for n in range(6)]
    detector = OutlierDetector()
    for replica in members:
        detector.answered(replica, True, 0.0, config, members)
    assert len(detector.ejected(0.0)) == 3
    # Every replica failing: never all of them out, even at 100 %.
    everything = OutliersConfig(consecutive_errors=1, success_rate_stdev=0, max_ejection_percent=100)
    detector = OutlierDetector()
    for replica in members:
        detector.answered(replica, True, 0.0, everything, members)
    assert len(detector.ejected(0.0)) == 5


def _interval(detector: OutlierDetector, rates: dict[str, float], config: OutliersConfig, start: float,
              calls: int = 100, seed: int = 7) -> list[str]:
    """`calls` answers per replica over one interval, failing at each replica's rate (seeded), then
    one answer past the interval's end, which compares them; the replicas ejected."""
    rng = random.Random(seed)
    members = list(rates)
    ejected = []
    for n in range(calls):
        for replica, rate in rates.items():
            now = start + config.interval_s * n / calls
            ejected += [e.replica_id for e in detector.answered(replica, rng.random() > rate, now, config, members)]
    first = members[0]
    ejected += [e.replica_id for e in detector.answered(first, False, start + config.interval_s, config, members)]
    return ejected


def test_a_success_rate_below_the_others_by_k_deviations_ejects_the_replica() -> None:
    config = OutliersConfig(consecutive_errors=0, success_rate_min_requests=50, interval_s=10)  # k = 1.9
    detector = OutlierDetector()
    rates = {"r-1": 1.0, "r-2": 0.99, "r-3": 1.0, "r-4": 0.99, "r-5": 1.0, "r-6": 0.5}
    assert _interval(detector, rates, config, 0.0) == ["r-6"]
    [ejection] = detector.ejected(10.0).values()
    assert ejection.reason.startswith("success rate 5") and "its backend's mean 9" in ejection.reason
    three = config.model_copy(update={"success_rate_stdev": 1.0, "success_rate_min_replicas": 3})
    assert _interval(OutlierDetector(), {"r-1": 1.0, "r-2": 0.99, "r-3": 0.5}, three, 0.0) == ["r-3"]


@pytest.mark.parametrize("seed", range(20))
def test_success_rates_alike_eject_nobody(seed: int) -> None:
    config = OutliersConfig(consecutive_errors=0, success_rate_min_requests=50)  # k = 1.9, 5 replicas at least
    rates = {f"r-{n}": 0.9 for n in range(6)}
    assert _interval(OutlierDetector(), rates, config, 0.0, seed=seed) == []


def test_success_rates_are_compared_only_with_enough_requests_and_replicas() -> None:
    config = OutliersConfig(consecutive_errors=0, success_rate_stdev=1.0, success_rate_min_requests=50)
    config = config.model_copy(update={"success_rate_min_replicas": 3})
    rates = {"r-1": 1.0, "r-2": 1.0, "r-3": 0.2}
    assert _interval(OutlierDetector(), rates, config, 0.0, calls=40) == [], "too few requests each"
    four = config.model_copy(update={"success_rate_min_replicas": 4})
    assert _interval(OutlierDetector(), rates, four, 0.0) == [], "fewer replicas than the minimum"
    k_too_high = config.model_copy(update={"success_rate_stdev": 1.9})
    assert _interval(OutlierDetector(), rates, k_too_high, 0.0) == [], "3 replicas: one is at most 1.15 sd below"


def test_a_replica_ejected_replace_after_times_is_worn_out_and_stays_out() -> None:
    config = OutliersConfig(consecutive_errors=1, success_rate_stdev=0, base_ejection_s=1, replace_after=3)
    detector = OutlierDetector()
    now = 0.0
    for count in (1, 2, 3):
        [ejection] = detector.answered("r-2", True, now, config, THREE)
        assert ejection.count == count and ejection.replace == (count == 3)
        now = ejection.until
    assert set(detector.worn_out()) == {"r-2"}
    assert set(detector.ejected(now + 1000)) == {"r-2"}, "kept out until the controller replaces it"
    assert detector.ejected(now)["r-2"].message(now).endswith("; replaced by the controller")
    detector.members(["r-1", "r-3", "r-4"])  # replaced: r-4 took its place
    assert detector.ejected(now) == {} and detector.worn_out() == {}


@pytest.mark.parametrize("keys, message", [
    ({"max_ejection_percent": 150}, "less than or equal to 100"),
    ({"base_ejection_s": 0}, "greater than 0"),
    ({"consecutive_errors": -1}, "greater than or equal to 0"),
    ({"success_rate_min_replicas": 1}, "greater than or equal to 2"),
])
def test_a_table_out_of_range_is_refused(keys: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        OutliersConfig(**keys)  # type: ignore[arg-type]
