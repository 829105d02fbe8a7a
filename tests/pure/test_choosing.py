"""Pure choices: weighted backends, shadow sampling, power-of-two replicas, queue admission."""

from __future__ import annotations

import random
from collections import Counter

from vocabulary.request_path.choosing import Admission, ShadowSampler, WeightedChoice, admit, pick_replica

# Chi-square critical value for one degree of freedom at p = 0.001.
CHI2_DF1_P001 = 10.83


def test_a_ninety_ten_split_over_ten_thousand_requests_is_within_chi_square_bound() -> None:
    rng = random.Random(1234)
    choice = WeightedChoice.from_weights({"v1": 0.9, "v2": 0.1})
    counts = Counter(choice.pick(rng.random()) for _ in range(10_000))
    expected = {"v1": 9_000, "v2": 1_000}
    chi2 = sum((counts[name] - e) ** 2 / e for name, e in expected.items())
    assert chi2 < CHI2_DF1_P001, counts


def test_a_single_backend_always_gets_the_request() -> None:
    choice = WeightedChoice.from_weights({"only": 1.0})
    assert {choice.pick(d) for d in (0.0, 0.5, 0.999999)} == {"only"}


def test_zero_weight_backends_never_get_requests() -> None:
    choice = WeightedChoice.from_weights({"a": 1.0, "b": 0.0})
    assert {choice.pick(d) for d in (0.0, 0.3, 0.999999)} == {"a"}


def test_weights_that_sum_slightly_below_one_leave_no_gap() -> None:
    choice = WeightedChoice.from_weights({"a": 0.3333333, "b": 0.6666666})
    assert choice.pick(0.99999999) == "b"


def test_no_traffic_picks_nothing() -> None:
    assert WeightedChoice.from_weights({}).pick(0.5) is None


def test_shadow_copies_about_the_configured_share() -> None:
    rng = random.Random(7)
    plan = ShadowSampler.from_shares({"shadow": 0.25})
    copies = sum(len(plan.sample(rng)) for _ in range(10_000))
    chi2 = (copies - 2_500) ** 2 / 2_500 + (copies - 2_500) ** 2 / 7_500
    assert chi2 < CHI2_DF1_P001, copies


def test_zero_share_shadows_are_never_sampled() -> None:
    assert ShadowSampler.from_shares({"s": 0.0}).sample(random.Random(1)) == []


def test_replica_choice_prefers_the_less_loaded_of_two() -> None:
    rng = random.Random(3)
    picks = Counter(pick_replica([5, 0], cap=10, rng=rng) for _ in range(100))
    assert picks == Counter({1: 100})


def test_replica_choice_never_picks_a_full_replica() -> None:
    rng = random.Random(5)
    picks = {pick_replica([2, 2, 1, 2], cap=2, rng=rng) for _ in range(200)}
    assert picks == {2}


def test_replica_choice_spreads_load_evenly_when_equal() -> None:
    rng = random.Random(11)
    picks = Counter(pick_replica([0, 0, 0], cap=10, rng=rng) for _ in range(3_000))
    assert all(800 < n < 1_200 for n in picks.values()), picks


def test_all_replicas_full_picks_none() -> None:
    assert pick_replica([3, 3], cap=3, rng=random.Random(1)) is None
    assert pick_replica([1], cap=1, rng=random.Random(1)) is None


def test_no_replicas_picks_none() -> None:
    assert pick_replica([], cap=3, rng=random.Random(1)) is None


def test_requests_wait_while_the_queue_has_room_and_are_rejected_past_it() -> None:
    assert admit(queued=0, max_queued=2) is Admission.WAIT
    assert admit(queued=1, max_queued=2) is Admission.WAIT
    assert admit(queued=2, max_queued=2) is Admission.REJECT
