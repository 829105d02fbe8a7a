"""The serving rules, once for the loader, the controller and the simulator."""

from __future__ import annotations

import pytest

from vocabulary.spec.backends import AutoscalingConfig, BackendConfig
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.serving_rules import (
    Rule,
    backend_in_use,
    route_key,
    state_problems,
    taken_routes,
    unknown_backends,
    unknown_callees,
    weight_sum,
    zero_replica_reason,
    zero_replica_traffic,
)


def backend(name: str = "a", **extra) -> BackendConfig:
    return BackendConfig(name=name, version="1", import_path="apps.echo:Echo", **extra)


def endpoint(name: str = "api", route: str = "/api", **extra) -> EndpointConfig:
    extra.setdefault("traffic", {"a": 1.0})
    return EndpointConfig(name=name, route=route, **extra)


def test_an_unknown_backend_is_located_at_its_key() -> None:
    [problem] = unknown_backends("api", "shadow", ["a", "zzz"], {"a"})
    assert (problem.rule, problem.path, problem.backend) == (Rule.UNKNOWN_BACKEND, ("endpoints", "api", "shadow", "zzz"), "zzz")
    assert problem.message == "endpoints.api.shadow: backend 'zzz' is not defined"


def test_a_backend_may_use_backends_and_endpoints_and_nothing_else() -> None:
    [problem] = unknown_callees("pipeline", ["words", "tagger", "nowhere"], {"words", "pipeline"}, {"tagger"})
    assert (problem.rule, problem.path) == (Rule.UNKNOWN_CALLEE, ("backends", "pipeline", "uses", 2))
    assert problem.message == "backends.pipeline.uses[2]: 'nowhere' is neither a backend nor an endpoint"


def test_weights_within_the_tolerance_sum_to_one() -> None:
    assert weight_sum("api", {"a": 0.3, "b": 0.7 + 1e-9}) == []


def test_weights_that_do_not_sum_to_one_are_a_problem() -> None:
    [problem] = weight_sum("api", {"a": 0.5, "b": 0.4})
    assert problem.message == "endpoints.api.traffic: weights sum to 0.9, not 1"


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        (backend(num_replicas=0), "num_replicas = 0"),
        (backend(autoscaling=AutoscalingConfig(min_replicas=0, max_replicas=2)), "autoscaling.min_replicas = 0"),
        (backend(num_replicas=0, autoscaling=AutoscalingConfig(min_replicas=1, max_replicas=2)), None),
        (backend(), None),
    ],
)
def test_the_reason_a_backend_can_have_zero_replicas_names_its_key(config: BackendConfig, reason: str | None) -> None:
    assert zero_replica_reason(config) == reason


def test_positive_traffic_to_a_backend_that_can_have_zero_replicas_is_a_problem() -> None:
    backends = {"a": backend(num_replicas=0), "b": backend("b", num_replicas=0), "c": None}
    [problem] = zero_replica_traffic("api", {"a": 0.5, "b": 0.0, "c": 0.5}, backends)
    assert problem.path == ("endpoints", "api", "traffic", "a")
    assert problem.message == (
        "endpoints.api.traffic: backend 'a' gets 50% of the traffic but can have 0 replicas (num_replicas = 0)"
    )


@pytest.mark.parametrize("route", ["/api", "/api/", "//api//"])
def test_routes_the_proxy_treats_as_one_are_one_route(route: str) -> None:
    [problem] = taken_routes({"api": endpoint(), "other": endpoint("other", route)})
    assert (problem.endpoint, problem.other, problem.path) == ("other", "api", ("endpoints", "other", "route"))


def test_the_root_route_stays_the_root() -> None:
    assert route_key("/") == "/" and route_key("//") == "/"


def test_a_backend_named_by_endpoints_is_in_use_by_each() -> None:
    endpoints = {
        "b": endpoint("b", "/b", shadow={"a": 0.1}, traffic={"x": 1.0}),
        "api": endpoint(),
        "c": endpoint("c", "/c", traffic={"x": 1.0}),
    }
    [problem] = backend_in_use("a", endpoints)
    assert problem.endpoints == ("api", "b")
    assert backend_in_use("x", {"api": endpoint()}) == []


def test_a_safe_state_has_no_problems() -> None:
    assert state_problems({"a": backend()}, {"api": endpoint()}) == []


def test_a_state_reports_every_rule_it_breaks() -> None:
    endpoints = {
        "api": endpoint(traffic={"a": 0.5, "gone": 0.4}),
        "copy": endpoint("copy", "/api/", traffic={"a": 1.0}),
    }
    rules = [problem.rule for problem in state_problems({"a": backend(num_replicas=0)}, endpoints)]
    assert sorted(rules) == sorted(
        [Rule.UNKNOWN_BACKEND, Rule.WEIGHT_SUM, Rule.ZERO_REPLICA_TRAFFIC, Rule.ZERO_REPLICA_TRAFFIC, Rule.ROUTE_TAKEN]
    )


def test_uses_that_go_round_in_a_circle_are_one_problem_per_cycle() -> None:
    from vocabulary.spec.serving_rules import circular_uses

    uses = {"a": ["b"], "b": ["api"], "c": ["c"], "d": ["a"], "e": []}
    problems = circular_uses(uses, {"api": {"a"}})
    assert [(p.rule, p.path) for p in problems] == [
        (Rule.CIRCULAR_USES, ("backends", "a", "uses")), (Rule.CIRCULAR_USES, ("backends", "c", "uses"))]
    assert "(a -> b -> a)" in problems[0].message and "(c -> c)" in problems[1].message
    assert circular_uses({"a": ["b"], "b": ["api"]}, {"api": {"c"}}) == []
