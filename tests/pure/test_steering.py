"""Header match and sticky split: testers pin themselves, users stay on one version, the split stays exact."""

from __future__ import annotations

from collections import Counter

import pytest

from proxy.routes.steering import Steering, cookie_value, sticky_point
from vocabulary.request_path.choosing import WeightedChoice
from vocabulary.spec.endpoints import EndpointConfig

KEYS = [f"user-{n}".encode() for n in range(10_000)]
# Chi-square critical values at p = 0.001, by degrees of freedom.
CHI2_CRITICAL = {1: 10.83, 2: 13.82}


def steering(**fields: object) -> Steering:
    config = EndpointConfig.model_validate({"name": "e", "route": "/e", "traffic": {"v1": 0.9, "v2": 0.1}, **fields})
    return Steering.from_config(config)


def chi_square(counts: Counter[str], weights: dict[str, float]) -> float:
    total = sum(counts.values())
    return sum((counts[name] - total * weight) ** 2 / (total * weight) for name, weight in weights.items())


MATCH = [
    {"header": "X-Canary", "value": "always", "backend": "v2"},
    {"header": "x-tier", "value": "gold", "backend": "v3"},
]


@pytest.mark.parametrize(
    ("headers", "backend"),
    [
        ([(b"x-canary", b"always")], "v2"),
        ([(b"x-tier", b"gold")], "v3"),
        ([(b"x-tier", b"gold"), (b"x-canary", b"always")], "v2"),  # rules in order: the first wins
        ([(b"x-canary", b"Always")], None),  # values match exactly
        ([(b"x-canary", b"always-not")], None),
        ([], None),
    ],
)
def test_a_header_rule_picks_its_backend(headers: list[tuple[bytes, bytes]], backend: str | None) -> None:
    assert steering(match=MATCH).matched(headers) == backend


def test_a_sticky_header_key_gives_the_same_point_every_time() -> None:
    rule = steering(sticky="header:X-User")
    assert rule.point([(b"x-user", b"ada")]) == rule.point([(b"x-user", b"ada")]) == sticky_point(b"ada")


def test_a_request_without_the_sticky_key_has_no_point() -> None:
    assert steering(sticky="header:x-user").point([(b"x-other", b"ada")]) is None


def test_a_sticky_cookie_is_read_from_the_cookie_header() -> None:
    rule = steering(sticky="cookie:session")
    assert rule.point([(b"cookie", b"theme=dark; session=abc")]) == sticky_point(b"abc")


@pytest.mark.parametrize(
    ("header", "value"), [(b"a=1; b=2", b"2"), (b"b=\"q\"", b"q"), (b"ab=1", None), (b"b", None)]
)
def test_cookie_values_are_found_by_exact_name(header: bytes, value: bytes | None) -> None:
    assert cookie_value(header, b"b") == value


def test_steering_without_rules_or_key_is_empty() -> None:
    assert not steering().steers and steering(sticky="cookie:s").steers and steering(match=MATCH[:1]).steers


@pytest.mark.parametrize("weights", [{"v1": 0.9, "v2": 0.1}, {"v1": 0.5, "v2": 0.5}, {"a": 0.2, "b": 0.3, "c": 0.5}])
def test_sticky_keys_as_a_whole_follow_the_weights(weights: dict[str, float]) -> None:
    choice = WeightedChoice.from_weights(weights)
    counts = Counter(choice.pick(sticky_point(key)) for key in KEYS)
    assert chi_square(counts, weights) < CHI2_CRITICAL[len(weights) - 1]


def test_a_key_moves_only_toward_the_backend_gaining_weight() -> None:
    before = WeightedChoice.from_weights({"v1": 0.9, "v2": 0.1})
    after = WeightedChoice.from_weights({"v1": 0.5, "v2": 0.5})
    moved = {(before.pick(sticky_point(k)), after.pick(sticky_point(k))) for k in KEYS}
    assert moved == {("v1", "v1"), ("v1", "v2"), ("v2", "v2")}
