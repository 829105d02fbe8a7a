"""Progressive delivery keys of the spec format: rollout, match, sticky, shadow comparison, update strategy."""

from __future__ import annotations

from typing import Any

import pytest

from gitops.specs.models import check_backend, check_endpoint
from vocabulary.spec.endpoints import EndpointConfig, ShadowCompare
from vocabulary.spec.keys import KeyKind
from vocabulary.spec.rollout_config import OnFailure
from vocabulary.spec.serving_rules import backend_in_use, state_problems

EP = ("endpoints", "e")
AT = ("backends", "b")


def endpoint(**fields: Any) -> dict[str, Any]:
    return {"route": "/e", "traffic": {"b": 1.0}, **fields}


def endpoint_messages(**fields: Any) -> list[str]:
    return [problem.message for problem in check_endpoint(endpoint(**fields), EP)[1]]


def test_an_empty_rollout_table_takes_the_defaults() -> None:
    spec, problems = check_endpoint(endpoint(rollout={}), EP)
    assert problems == () and spec is not None and spec.rollout is not None
    assert spec.rollout.steps == [0.1, 0.5, 1.0] and spec.rollout.on_failure == OnFailure.ROLLBACK.value
    assert spec.rollout.max_p99_latency_s is None


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([], "must list at least one step"),
        ([0.0, 1.0], "each step must be in (0, 1] (got 0)"),
        ([0.5, 1.5], "each step must be in (0, 1] (got 1.5)"),
        ([0.5, 0.5, 1.0], "must be strictly increasing"),
        ([0.25, 0.5], "must end at 1.0, the split in git (ends at 0.5)"),
    ],
)
def test_rollout_steps_rise_strictly_to_one(steps: list[float], message: str) -> None:
    assert endpoint_messages(rollout={"steps": steps}) == [f"endpoints.e.rollout.steps: {message}"]


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("step_interval_s", 0, "must be > 0 (got 0)"),
        ("min_requests", -1, "must be >= 0 (got -1)"),
        ("max_error_ratio", 1.5, "must be <= 1 (got 1.5)"),
        ("max_p99_latency_s", 0, "must be > 0 (got 0)"),
        ("on_failure", "retry", "must be 'rollback' or 'pause' (got 'retry')"),
    ],
)
def test_rollout_thresholds_are_range_checked(key: str, value: Any, message: str) -> None:
    assert endpoint_messages(rollout={key: value}) == [f"endpoints.e.rollout.{key}: {message}"]


def test_a_match_rule_reads_its_header_case_insensitively() -> None:
    spec, _ = check_endpoint(endpoint(match=[{"header": "X-Canary", "value": "Yes", "backend": "b"}]), EP)
    assert spec is not None and (spec.match[0].header, spec.match[0].value) == ("x-canary", "Yes")


def test_a_match_rule_needs_a_header_name() -> None:
    assert endpoint_messages(match=[{"header": "x canary", "value": "1", "backend": "b"}]) == [
        "endpoints.e.match[0].header: 'x canary' is not an HTTP header name"
    ]


@pytest.mark.parametrize(
    ("written", "kind", "name"),
    [("header:X-User-Id", KeyKind.HEADER, "x-user-id"), ("cookie:Session", KeyKind.COOKIE, "Session")],
)
def test_sticky_names_a_header_or_a_cookie(written: str, kind: KeyKind, name: str) -> None:
    config = EndpointConfig(name="e", route="/e", traffic={"b": 1.0}, sticky=written)
    assert config.sticky_key() == (kind, name)


@pytest.mark.parametrize("written", ["x-user-id", "header:", "query:user", "cookie:a b"])
def test_sticky_must_be_header_or_cookie_with_a_name(written: str) -> None:
    assert endpoint_messages(sticky=written) == [
        f"endpoints.e.sticky: must be 'header:NAME' or 'cookie:NAME' (got '{written}')"
    ]


def test_shadow_compare_is_one_of_four_modes() -> None:
    assert [mode.value for mode in ShadowCompare] == ["none", "status", "json", "exact"]
    assert endpoint_messages(shadow_compare="body") == [
        "endpoints.e.shadow_compare: must be 'none', 'status', 'json' or 'exact' (got 'body')"
    ]


def test_shadow_ignore_needs_a_json_comparison() -> None:
    assert endpoint_messages(shadow_compare="status", shadow_ignore=["t"]) == [
        'endpoints.e.shadow_ignore: only a json comparison ignores keys; set shadow_compare = "json"'
    ]
    assert endpoint_messages(shadow_compare="json", shadow_ignore=["t"]) == []


def test_an_update_may_replace_replicas_in_place() -> None:
    spec, problems = check_backend({"import_path": "a:b", "update": {"max_surge": 0, "max_unavailable": 1}}, AT)
    assert problems == () and spec is not None and spec.update is not None


def test_an_update_with_neither_spare_nor_gap_could_never_progress() -> None:
    _, problems = check_backend({"import_path": "a:b", "update": {"max_surge": 0, "max_unavailable": 0}}, AT)
    assert [problem.loc for problem in problems] == [("backends", "b", "update")]


def test_a_match_naming_an_unknown_backend_breaks_the_state() -> None:
    config = EndpointConfig(
        name="e", route="/e", traffic={"b": 1.0}, match=({"header": "x", "value": "1", "backend": "ghost"},)
    )
    problems = state_problems({"b": _Backend()}, {"e": config})
    assert [problem.path for problem in problems] == [("endpoints", "e", "match", 0, "backend")]


def test_a_backend_named_only_by_a_match_rule_is_in_use() -> None:
    config = EndpointConfig(
        name="e", route="/e", traffic={"b": 1.0}, match=({"header": "x", "value": "1", "backend": "c"},)
    )
    assert backend_in_use("c", {"e": config})[0].endpoints == ("e",)
    assert "c" in config.backends()


class _Backend:
    num_replicas = 1
    autoscaling = None
    cold_start_timeout_s = None


def test_a_rollout_metric_check_reads_its_query_and_bounds() -> None:
    check = {"name": "error-share", "query": 'sum(rate(x{backend="$backend"}[$interval]))', "max": 0.01}
    spec, problems = check_endpoint(endpoint(rollout={"metrics": [check]}), EP)
    assert problems == () and spec is not None and spec.rollout is not None
    assert spec.rollout.metrics[0].max == 0.01 and spec.rollout.metrics[0].min is None


@pytest.mark.parametrize(
    ("checks", "message"),
    [
        ([{"name": "e", "query": "q"}], "metrics[0]: needs min or max (or both)"),
        ([{"name": "e", "query": "q", "min": 2, "max": 1}], "metrics[0]: min (2) is above max (1)"),
        ([{"name": "e", "query": "q", "max": 1}] * 2, "metrics: check names must differ ('e' is used twice)"),
    ],
)
def test_a_rollout_metric_check_needs_a_bound_and_its_own_name(checks: list[dict[str, Any]], message: str) -> None:
    assert endpoint_messages(rollout={"metrics": checks}) == [f"endpoints.e.rollout.{message}"]
