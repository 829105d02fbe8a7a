"""The spec format's tables: keys, types, defaults and ranges (docs/reference/spec.md)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from gitops.specs.models import (
    DERIVED_BACKEND_FIELDS,
    DERIVED_ENDPOINT_FIELDS,
    AutoscalingSpec,
    BackendSpec,
    EndpointSpec,
    MatchSpec,
    RayActorOptionsSpec,
    RolloutSpec,
    RuntimeEnvSpec,
    UpdateSpec,
    check_backend,
    check_endpoint,
    is_valid_name,
)
from vocabulary.spec.backends import AutoscalingConfig, BackendConfig, UpdateConfig
from vocabulary.spec.endpoints import EndpointConfig, MatchRule
from vocabulary.spec.rollout_config import RolloutConfig

AT = ("backends", "b")
EP = ("endpoints", "e")


def backend(**fields: Any) -> dict[str, Any]:
    return {"import_path": "apps.echo:Echo", **fields}


def endpoint(**fields: Any) -> dict[str, Any]:
    return {"route": "/echo", "traffic": {"b": 1.0}, **fields}


def messages(raw: Any, check=check_backend, at=AT) -> list[str]:
    return [problem.message for problem in check(raw, at)[1]]


def test_backend_defaults_follow_the_product_contract() -> None:
    spec, problems = check_backend(backend(), AT)
    assert problems == ()
    assert spec is not None
    assert (spec.num_replicas, spec.max_concurrent_queries) == (1, 100)
    assert (spec.graceful_shutdown_timeout_s, spec.health_check_period_s, spec.health_check_timeout_s) == (20, 10, 30)
    assert spec.init_args == [] and spec.init_kwargs == {} and spec.user_config is None
    assert spec.code_paths is None and spec.version is None and spec.autoscaling is None


def test_endpoint_methods_default_to_get_and_post() -> None:
    spec, _ = check_endpoint(endpoint(), EP)
    assert spec is not None and spec.methods == ["GET", "POST"] and spec.timeout_s == 30


def test_a_string_is_not_silently_an_integer() -> None:
    assert messages(backend(num_replicas="2")) == ["backends.b.num_replicas: must be an integer (got '2')"]


def test_a_boolean_is_not_a_number() -> None:
    assert messages(backend(max_concurrent_queries=True)) == [
        "backends.b.max_concurrent_queries: must be an integer (got true)"
    ]


def test_an_integer_is_accepted_where_a_float_is_expected() -> None:
    spec, _ = check_backend(backend(health_check_period_s=5), AT)
    assert spec is not None and spec.health_check_period_s == 5.0


def test_unknown_keys_are_rejected_at_every_level() -> None:
    assert messages(backend(replicas=2, ray_actor_options={"cpus": 1})) == [
        "backends.b.ray_actor_options: unknown key 'cpus' (did you mean 'num_cpus'?)",
        "backends.b: unknown key 'replicas' (did you mean 'num_replicas'?)",
    ]


def test_missing_import_path_is_reported() -> None:
    assert messages({}) == [
        "backends.b: missing required key 'import_path' (or an [llm] table: the built-in OpenAI-compatible backend)"
    ]


def test_negative_replicas_are_out_of_range() -> None:
    assert messages(backend(num_replicas=-1)) == ["backends.b.num_replicas: must be >= 0 (got -1)"]


def test_zero_max_concurrent_queries_is_out_of_range() -> None:
    assert messages(backend(max_concurrent_queries=0)) == ["backends.b.max_concurrent_queries: must be >= 1 (got 0)"]


def test_import_path_must_be_module_colon_attribute() -> None:
    assert messages(backend(import_path="apps.echo.Echo")) == [
        "backends.b.import_path: must look like 'package.module:attribute' (got 'apps.echo.Echo')"
    ]


def test_num_replicas_cannot_be_combined_with_autoscaling() -> None:
    raw = backend(num_replicas=2, autoscaling={"max_replicas": 3})
    assert messages(raw) == ["backends.b: num_replicas cannot be combined with [autoscaling]"]


def test_autoscaling_min_must_not_exceed_max() -> None:
    raw = backend(autoscaling={"min_replicas": 4, "max_replicas": 2})
    assert messages(raw) == ["backends.b.autoscaling: min_replicas (4) must be <= max_replicas (2)"]


def test_rules_between_keys_are_reported_with_type_errors_elsewhere() -> None:
    raw = backend(num_replicas=1, autoscaling={"max_replicas": 2}, user_config=1, timeout=3)
    assert len(messages(raw)) == 2


def test_runtime_env_may_not_set_a_working_dir() -> None:
    assert messages(backend(runtime_env={"working_dir": "/tmp"})) == [
        "backends.b.runtime_env: unknown key 'working_dir'"
    ]


def test_code_paths_must_stay_inside_the_repository() -> None:
    assert messages(backend(code_paths=["../outside"])) == [
        "backends.b.code_paths: must be relative paths inside the repository (got '../outside')"
    ]


def test_code_paths_are_normalised() -> None:
    spec, _ = check_backend(backend(code_paths=["./apps/", "lib//x"]), AT)
    assert spec is not None and spec.code_paths == ["apps", "lib/x"]


def test_autoscaled_backend_starts_at_its_minimum() -> None:
    spec, _ = check_backend(backend(autoscaling={"min_replicas": 2, "max_replicas": 5}), AT)
    assert spec is not None and spec.replica_target() == 2


@pytest.mark.parametrize(
    ("raw", "zero"),
    [
        (backend(num_replicas=0), True),
        (backend(autoscaling={"min_replicas": 0, "max_replicas": 1}), True),
        (backend(), False),
    ],
)
def test_a_backend_knows_whether_it_can_have_zero_replicas(raw: dict[str, Any], zero: bool) -> None:
    spec, _ = check_backend(raw, AT)
    assert spec is not None and spec.can_have_zero_replicas() is zero


def test_route_must_start_with_a_slash() -> None:
    assert messages(endpoint(route="echo"), check_endpoint, EP) == [
        "endpoints.e.route: must start with '/' (got 'echo')"
    ]


def test_proxy_paths_are_reserved() -> None:
    assert messages(endpoint(route="/-/routes"), check_endpoint, EP) == [
        "endpoints.e.route: '/-/routes' is reserved for the proxy's own paths (/-/...)"
    ]


def test_methods_must_be_upper_case() -> None:
    assert messages(endpoint(methods=["get"]), check_endpoint, EP) == [
        "endpoints.e.methods: 'get' must be upper case ('GET')"
    ]


def test_methods_must_be_http_methods() -> None:
    [message] = messages(endpoint(methods=["FETCH"]), check_endpoint, EP)
    assert message.startswith("endpoints.e.methods: 'FETCH' is not an HTTP method (one of CONNECT, DELETE, GET")


def test_methods_must_not_be_empty() -> None:
    assert messages(endpoint(methods=[]), check_endpoint, EP) == ["endpoints.e.methods: must not be empty"]


def test_traffic_weights_are_fractions() -> None:
    assert messages(endpoint(traffic={"b": 1.5}), check_endpoint, EP) == [
        "endpoints.e.traffic.b: must be <= 1 (got 1.5)"
    ]


@pytest.mark.parametrize("fraction", [0, 1.01, -0.1])
def test_shadow_fractions_are_in_zero_one(fraction: float) -> None:
    assert len(messages(endpoint(shadow={"c": fraction}), check_endpoint, EP)) == 1


def test_a_table_must_be_a_table() -> None:
    assert messages([1, 2], check_endpoint, EP) == ["endpoints.e: must be a table (got [1, 2])"]


@pytest.mark.parametrize("name", ["echo", "echo-v1", "a", "0", "a.b_c-d", "x" * 63])
def test_valid_names(name: str) -> None:
    assert is_valid_name(name)


@pytest.mark.parametrize("name", ["", "Echo", "-echo", "echo-", "echo v1", "x" * 64, "é"])
def test_invalid_names(name: str) -> None:
    assert not is_valid_name(name)


# --- one definition: the spec is the runtime config as a file writes it ---------------

SPEC_OF = [
    (BackendConfig, BackendSpec, DERIVED_BACKEND_FIELDS),
    (EndpointConfig, EndpointSpec, DERIVED_ENDPOINT_FIELDS),
    (AutoscalingConfig, AutoscalingSpec, frozenset()),
    (UpdateConfig, UpdateSpec, frozenset()),
    (RolloutConfig, RolloutSpec, frozenset()),
    (MatchRule, MatchSpec, frozenset()),
]


@pytest.mark.parametrize(("config", "spec", "derived"), SPEC_OF, ids=lambda v: getattr(v, "__name__", ""))
def test_every_config_field_is_a_spec_key_of_the_same_name_or_derived(
    config: type[BaseModel], spec: type[BaseModel], derived: frozenset[str]
) -> None:
    assert set(config.model_fields) - derived <= set(spec.model_fields)
    assert derived <= set(config.model_fields)


@pytest.mark.parametrize(("config", "spec", "derived"), SPEC_OF, ids=lambda v: getattr(v, "__name__", ""))
def test_a_spec_key_has_the_default_and_description_of_its_config_field(
    config: type[BaseModel], spec: type[BaseModel], derived: frozenset[str]
) -> None:
    for name, field in config.model_fields.items():
        if name not in derived:
            key = spec.model_fields[name]
            assert key.description == field.description, name
            # a backend with an [llm] table writes no import_path: the loader sets the built-in app's
            assert key.is_required() == field.is_required() or (spec is BackendSpec and name == "import_path"), name


@pytest.mark.parametrize(
    "model",
    [BackendConfig, EndpointConfig, AutoscalingConfig, BackendSpec, EndpointSpec, AutoscalingSpec,
     RayActorOptionsSpec, RuntimeEnvSpec, UpdateConfig, UpdateSpec, RolloutConfig, RolloutSpec, MatchRule, MatchSpec],
    ids=lambda model: model.__name__,
)
def test_every_field_has_a_description(model: type[BaseModel]) -> None:
    assert [name for name, field in model.model_fields.items() if not field.description] == []


def test_autoscaling_defaults_follow_the_product_contract() -> None:
    spec, _ = check_backend(backend(autoscaling={"max_replicas": 3}), AT)
    assert spec is not None and spec.autoscaling is not None
    assert (spec.autoscaling.min_replicas, spec.autoscaling.target_ongoing_requests) == (1, 2.0)
    assert (spec.autoscaling.upscale_delay_s, spec.autoscaling.downscale_delay_s) == (5.0, 30.0)


def test_a_range_declared_on_the_config_is_checked_in_the_file() -> None:
    assert messages(backend(autoscaling={"min_replicas": 0, "max_replicas": 0})) == [
        "backends.b.autoscaling.max_replicas: must be >= 1 (got 0)"
    ]
