"""The spec format as pydantic models: every key, type, default and range.

This module owns what one `[backends.NAME]` or `[endpoints.NAME]` table may
contain; docs/reference/spec.md is generated from it. It validates one table
at a time and knows nothing about files, line numbers, other files, git or
Ray: cross-file rules and locations belong to `gitops.specs.documents`.

A table's keys are not declared here: they are the fields of the runtime
config in `vocabulary.spec` (same name, default, range and description),
less the fields the loader derives (`DERIVED_BACKEND_FIELDS`,
`DERIVED_ENDPOINT_FIELDS`). This module adds only what a file needs: strict
typing (TOML `"2"` is not the integer 2, `true` is not 1), unknown keys
rejected so a typo is an error rather than a silently ignored setting, a
TOML type where the runtime type differs (an array for a tuple, a checked
table for a free dict), the keys only a file has (`code_paths`, an optional
`version`) and the validators of written values.

Validation is as strict as Ray, so that nothing valid here fails at apply:
numbers are finite, resource amounts are multiples of Ray's resource unit
(0.0001) and below its fixed-point ceiling, `resources` holds no CPU, GPU
or memory (their own keys say those), environment variable names are names,
pip entries are requirements, never pip options, local paths or URLs with
credentials, and replica counts stay under the agent's `--max-replicas`.
"""

from __future__ import annotations

import difflib
import enum
import functools
import math
import re
from copy import copy
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Mapping, TypeGuard, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails, to_jsonable_python

from vocabulary.spec.backends import (
    AutoscalingConfig,
    BackendConfig,
    BatchingConfig,
    ModelConfig,
    SecretChange,
    SecretConfig,
    UpdateConfig,
)
from vocabulary.spec.base import ENVIRONMENT_OVERRIDABLE
from vocabulary.spec.endpoints import (
    CaptureConfig,
    EndpointConfig,
    LimitsConfig,
    MatchRule,
    ShadowCompare,
    TracingConfig,
    grpc_method_name,
    one_limit_set,
    one_match_source,
    streaming_methods_of_a_service,
)
from vocabulary.spec.llm import BUILTIN_APP, LLMConfig, LLMEngine, llm_problem
from vocabulary.spec.placement import PlacementConfig, PlacementStrategy, actor_needs, bundle_text
from vocabulary.spec.rollout_config import MetricCheck, OnFailure, RolloutConfig, bounded_check
from vocabulary.spec.routing import MultiplexConfig, RoutingConfig, RoutingPolicy, keyed_routing, multiplex_alone
from vocabulary.spec.traffic_policy import CircuitConfig, OutliersConfig, RetriesConfig, retries_consistent
from vocabulary.spec.v2 import (
    BackendProtocol,
    TensorConfig,
    TensorDatatype,
    V2Config,
    tensor_name,
    tensor_shape,
    tensors_problem,
    v2_problem,
)
from vocabulary.replicas.model_digests import digest_problem, source_problem
from vocabulary.spec.serving_rules import route_problem, zero_replica_reason
from gitops.specs.limits import DEFAULT_MAX_REPLICAS

__all__ = [
    "NAME_PATTERN",
    "did_you_mean",
    "known_keys",
    "HTTP_METHODS",
    "DERIVED_BACKEND_FIELDS",
    "DERIVED_ENDPOINT_FIELDS",
    "AutoscalingSpec",
    "BatchingSpec",
    "RoutingSpec",
    "MultiplexSpec",
    "UpdateSpec",
    "RolloutSpec",
    "TracingSpec",
    "CaptureSpec",
    "MatchSpec",
    "LimitsSpec",
    "RetriesSpec",
    "OutliersSpec",
    "CircuitSpec",
    "RayActorOptionsSpec",
    "PlacementSpec",
    "V2Spec",
    "LLMSpec",
    "RuntimeEnvSpec",
    "BackendSpec",
    "EndpointSpec",
    "SecretSpec",
    "DERIVED_SECRET_FIELDS",
    "ModelSpec",
    "DERIVED_MODEL_FIELDS",
    "is_valid_name",
    "RAY_RESOURCE_UNIT",
    "RAY_RESOURCE_MAX",
    "ENV_VAR_NAME",
    "dotted",
    "Loc",
    "Problem",
    "check_backend",
    "check_endpoint",
    "check_secret",
    "check_model",
    "literal_credential",
]

NAME_PATTERN = re.compile(r"[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?")
HTTP_METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"}
)
# Config fields no file sets: the loader derives them (name from the table's
# key, version from the code, working_dir and commit from the applied commit).
DERIVED_BACKEND_FIELDS = frozenset({"name", "version", "working_dir", "commit", "secret_digests", "model_sources"})
DERIVED_ENDPOINT_FIELDS = frozenset({"name", "rollout_step", "grpc_methods"})
DERIVED_SECRET_FIELDS = frozenset({"name"})
DERIVED_MODEL_FIELDS = frozenset({"name"})
# Environment variables whose names say they hold a credential: a literal
# value there is a secret in plain text (docs/guides/secrets.md says what to do).
_CREDENTIAL_NAME = re.compile(r".*(PASSWORD|PASSWD|TOKEN|SECRET|CREDENTIAL).*|.*_KEY|KEY", re.IGNORECASE)
# scheme://user:password@host — a credential whatever the variable's name.
_URL_PASSWORD = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^/?#\s@:]*:[^/?#\s@]+@")
_IMPORT_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")

# Ray holds resource amounts as 64-bit integers of 0.0001 units and rounds
# anything finer (ray._raylet.RESOURCE_UNIT_SCALING = 10000).
RAY_RESOURCE_UNIT = 0.0001
RAY_RESOURCE_MAX = float(2**63 // 10000 // 10**9 * 10**9)  # 922,337,000,000,000
ENV_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Names the replica's Ray options own; `resources` must not repeat them.
_BUILT_IN_RESOURCES = frozenset({"CPU", "GPU", "memory"})
_PIP_REQUIREMENT_START = re.compile(r"[A-Za-z0-9]")
_URL_WITH_CREDENTIALS = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/@\s]*@")


def _in_resource_units(value: float) -> float:
    units = value / RAY_RESOURCE_UNIT
    if not math.isclose(units, round(units), rel_tol=1e-9, abs_tol=1e-6):
        raise ValueError(f"Ray counts resources in steps of {RAY_RESOURCE_UNIT} (got {value})")
    return value


NonNegative = Annotated[float, Field(ge=0)]
ResourceAmount = Annotated[float, Field(ge=0, le=RAY_RESOURCE_MAX), AfterValidator(_in_resource_units)]
Fraction = Annotated[float, Field(ge=0, le=1)]
ShadowFraction = Annotated[float, Field(gt=0, le=1)]


def is_valid_name(name: str) -> bool:
    return NAME_PATTERN.fullmatch(name) is not None


class _Spec(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False)


def _file_keys(
    config: type[BaseModel], derived: frozenset[str], file_types: Mapping[str, Any]
) -> dict[str, Any]:
    """The keys of a file table: `config`'s fields less `derived`, each with
    the config's default, range and description. `file_types` gives the type
    a file writes where it differs from the runtime type; the default is then
    the runtime default read as that type."""
    keys: dict[str, Any] = {}
    for name, info in config.model_fields.items():
        if name in derived:
            continue
        if name not in file_types:
            keys[name] = (info.annotation, copy(info))
            continue
        file_type = Annotated[file_types[name], *info.metadata] if info.metadata else file_types[name]
        keys[name] = (file_type, _file_default(info, file_types[name]))
    return keys


def _file_default(info: FieldInfo, file_type: Any) -> FieldInfo:
    if info.is_required():
        return Field(description=info.description, json_schema_extra=info.json_schema_extra)
    runtime_default = to_jsonable_python(info.get_default(call_default_factory=True))
    return Field(
        default=TypeAdapter(file_type).validate_python(runtime_default),
        description=info.description,
        json_schema_extra=info.json_schema_extra,
    )


def _one_of(values: type[enum.Enum]) -> Any:
    """A str enum as a file writes it: one of its values (strict mode takes no strings for enums)."""
    return Literal[tuple(value.value for value in values)]


AutoscalingSpec = create_model(
    "AutoscalingSpec", __base__=_Spec, __doc__=AutoscalingConfig.__doc__, **_file_keys(AutoscalingConfig, frozenset(), {})
)

BatchingSpec = create_model(
    "BatchingSpec", __base__=_Spec, __doc__=BatchingConfig.__doc__, **_file_keys(BatchingConfig, frozenset(), {})
)
RoutingSpec = create_model(
    "RoutingSpec",
    __base__=_Spec,
    __doc__=RoutingConfig.__doc__,
    __validators__={"_keyed": model_validator(mode="after")(keyed_routing)},  # type: ignore[dict-item]  # pydantic types __validators__ as plain callables, its decorators return proxies
    **_file_keys(RoutingConfig, frozenset(), {"policy": _one_of(RoutingPolicy)}),
)
MultiplexSpec = create_model(
    "MultiplexSpec", __base__=_Spec, __doc__=MultiplexConfig.__doc__,
    **_file_keys(MultiplexConfig, frozenset(), {"models": list[str]}),
)
UpdateSpec = create_model(
    "UpdateSpec", __base__=_Spec, __doc__=UpdateConfig.__doc__, **_file_keys(UpdateConfig, frozenset(), {})
)
MetricCheckSpec = create_model(
    "MetricCheckSpec",
    __base__=_Spec,
    __doc__=MetricCheck.__doc__,
    __validators__={"_bounded": model_validator(mode="after")(bounded_check)},  # type: ignore[dict-item]  # pydantic types __validators__ as plain callables, its decorators return proxies
    **_file_keys(MetricCheck, frozenset(), {}),
)
RolloutSpec = create_model(
    "RolloutSpec",
    __base__=_Spec,
    __doc__=RolloutConfig.__doc__,
    **_file_keys(
        RolloutConfig,
        frozenset(),
        {"steps": list[float], "on_failure": _one_of(OnFailure), "metrics": list[MetricCheckSpec]},  # type: ignore[valid-type]  # create_model builds it: a variable to mypy
    ),
)
LimitsSpec = create_model(
    "LimitsSpec",
    __base__=_Spec,
    __doc__=LimitsConfig.__doc__,
    __validators__={"_one_limit": model_validator(mode="after")(one_limit_set)},  # type: ignore[dict-item]  # pydantic types __validators__ as plain callables, its decorators return proxies
    **_file_keys(LimitsConfig, frozenset(), {}),
)
MatchSpec = create_model(
    "MatchSpec",
    __base__=_Spec,
    __doc__=MatchRule.__doc__,
    __validators__={"_one_source": model_validator(mode="after")(one_match_source)},  # type: ignore[dict-item]  # pydantic types __validators__ as plain callables, its decorators return proxies
    **_file_keys(MatchRule, frozenset(), {}),
)
TracingSpec = create_model(
    "TracingSpec", __base__=_Spec, __doc__=TracingConfig.__doc__, **_file_keys(TracingConfig, frozenset(), {})
)
RetriesSpec = create_model(
    "RetriesSpec",
    __base__=_Spec,
    __doc__=RetriesConfig.__doc__,
    __validators__={"_checked": model_validator(mode="after")(retries_consistent)},  # type: ignore[dict-item]  # pydantic types __validators__ as plain callables, its decorators return proxies
    **_file_keys(RetriesConfig, frozenset(), {"retry_on": list[str], "methods": list[str]}),
)
OutliersSpec = create_model(
    "OutliersSpec", __base__=_Spec, __doc__=OutliersConfig.__doc__, **_file_keys(OutliersConfig, frozenset(), {})
)
CircuitSpec = create_model(
    "CircuitSpec", __base__=_Spec, __doc__=CircuitConfig.__doc__, **_file_keys(CircuitConfig, frozenset(), {})
)
CaptureSpec = create_model(
    "CaptureSpec", __base__=_Spec, __doc__=CaptureConfig.__doc__,
    **_file_keys(CaptureConfig, frozenset(), {"redact": list[str]}),
)


class RayActorOptionsSpec(_Spec):
    """The Ray actor options a backend may set; the config holds them as a dict for Ray."""

    num_cpus: ResourceAmount | None = Field(default=None, description="CPUs reserved for each replica.")
    num_gpus: ResourceAmount | None = Field(default=None, description="GPUs reserved for each replica.")
    memory: ResourceAmount | None = Field(
        default=None,
        description="Memory reserved for each replica, in bytes, and its limit: on Linux the replica's process may "
        "map this much private memory beyond what it holds before the code loads (RLIMIT_DATA: counted when mapped, "
        "not when touched); past it an allocation raises MemoryError, in a constructor failing the start.",
    )
    resources: dict[str, ResourceAmount] | None = Field(
        default=None,
        description="Custom Ray resources reserved for each replica: name -> amount "
        "(not CPU, GPU or memory: num_cpus, num_gpus and memory say those).",
    )
    accelerator_type: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$",
        description="The GPU model each replica needs, as Ray names it (A100, H100, L4, ...): only nodes "
        "started with that accelerator type take the replica (with [placement], its GPU bundles).",
    )

    @field_validator("resources")
    @classmethod
    def _custom_resources_only(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for name in value or {}:
            if name in _BUILT_IN_RESOURCES:
                key = {"CPU": "num_cpus", "GPU": "num_gpus", "memory": "memory"}[name]
                raise ValueError(f"'{name}' is not a custom resource; set ray_actor_options.{key} instead")
            if not name.strip():
                raise ValueError("a resource name must not be empty")
        return value


def _bundle_shape(bundle: dict[str, float]) -> dict[str, float]:
    for name in bundle:
        if not name.strip() or len(name) > 128:
            raise ValueError(f"'{name}' is not a resource name (1-128 characters)")
    if not any(bundle.values()):
        raise ValueError("a bundle must ask for some resource (e.g. {GPU = 1})")
    return bundle


PlacementSpec = create_model(
    "PlacementSpec",
    __base__=_Spec,
    __doc__=PlacementConfig.__doc__,
    **_file_keys(
        PlacementConfig,
        frozenset(),
        {
            "bundles": list[Annotated[dict[str, ResourceAmount], AfterValidator(_bundle_shape)]],
            "strategy": _one_of(PlacementStrategy),
        },
    ),
)


def placement_fits_actor(spec: Any) -> Any:
    """The replica's actor runs in the first bundle: what its ray_actor_options ask must fit there."""
    placement = getattr(spec, "placement", None)
    if placement is None:
        return spec
    options = spec.ray_actor_options
    options = options.model_dump(exclude_none=True) if isinstance(options, BaseModel) else dict(options)
    first = placement.bundles[0]
    over = {k: v for k, v in actor_needs(options).items() if first.get(k, 0.0) < v}
    if over:
        raise ValueError(
            f"ray_actor_options asks for {bundle_text(over)}, more than the first bundle of [placement] "
            f"{bundle_text(first)} offers: the replica's actor runs in that bundle"
        )
    return spec


TensorSpec = create_model(
    "TensorSpec",
    __base__=_Spec,
    __doc__=TensorConfig.__doc__,
    __validators__={
        "_name": field_validator("name")(lambda value: tensor_name(value)),
        "_shape": field_validator("shape")(lambda value: tensor_shape(value)),
    },
    **_file_keys(
        TensorConfig,
        frozenset(),
        {"datatype": _one_of(TensorDatatype), "shape": list[int]},
    ),
)
V2Spec = create_model(
    "V2Spec",
    __base__=_Spec,
    __doc__=V2Config.__doc__,
    __validators__={
        "_name": field_validator("name")(lambda value: None if value is None else tensor_name(value)),
        "_tensors": field_validator("inputs", "outputs")(lambda value: tensors_problem(value)),
    },
    **_file_keys(V2Config, frozenset(), {"inputs": list[TensorSpec], "outputs": list[TensorSpec]}),  # type: ignore[valid-type]  # create_model builds it: a variable to mypy
)


def v2_fits_backend(spec: Any) -> Any:
    """`protocol = "v2"` and its `[v2]` table go together and fit the backend (`vocabulary.spec.v2.v2_problem`)."""
    problem = v2_problem(spec, spec.models)
    if problem is not None:
        raise ValueError(problem)
    return spec


LLMSpec = create_model(
    "LLMSpec",
    __base__=_Spec,
    __doc__=LLMConfig.__doc__,
    **_file_keys(LLMConfig, frozenset(), {
        "engine": _one_of(LLMEngine), "engine_args": dict[str, Any], "lora_adapters": list[str],
    }),
)


def llm_or_import_path(spec: Any) -> Any:
    """A backend runs its own code (import_path) or the built-in LLM app ([llm]), and an [llm]
    table fits the backend's models and GPUs (`vocabulary.spec.llm.llm_problem`)."""
    llm = getattr(spec, "llm", None)
    if llm is None:
        if spec.import_path is None:
            raise ValueError("missing required key 'import_path' (or an [llm] table: the built-in OpenAI-compatible backend)")
        return spec
    if spec.import_path is not None:
        raise ValueError("import_path and [llm] cannot both be set: an [llm] backend runs the built-in OpenAI app")
    for key in ("init_args", "init_kwargs", "batching", "multiplex", "protocol"):
        if getattr(spec, key):
            raise ValueError(f"{key} cannot be set with [llm]: the built-in OpenAI app takes its settings from [llm]")
    options = spec.ray_actor_options
    options = options.model_dump(exclude_none=True) if isinstance(options, BaseModel) else dict(options)
    placement = None if spec.placement is None else PlacementConfig.model_validate(spec.placement.model_dump())
    problem = llm_problem(LLMConfig.model_validate(llm.model_dump()), spec.models, placement, options)
    if problem is not None:
        raise ValueError(problem)
    return spec


class RuntimeEnvSpec(_Spec):
    """The runtime_env keys a backend may set.

    `working_dir` and `py_modules` are deliberately absent: a backend's code
    always comes from the applied commit.
    """

    env_vars: dict[str, str] | None = Field(
        default=None,
        description="Environment variables of each replica: names match [A-Za-z_][A-Za-z0-9_]*.",
        json_schema_extra=ENVIRONMENT_OVERRIDABLE,
    )
    pip: list[str] | None = Field(
        default=None,
        description="pip requirements installed for the replicas ('name', 'name==1.0', 'name @ https://...'); "
        "no pip options, local paths or URLs with credentials.",
    )

    @field_validator("env_vars")
    @classmethod
    def _env_var_names(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for name, text in (value or {}).items():
            if ENV_VAR_NAME.fullmatch(name) is None:
                raise ValueError(f"'{name}' is not an environment variable name ({ENV_VAR_NAME.pattern})")
            if "\0" in text:
                raise ValueError(f"the value of {name} must not contain a NUL character")
        return value

    @field_validator("pip")
    @classmethod
    def _requirements_only(cls, value: list[str] | None) -> list[str] | None:
        for entry in value or ():
            problem = _pip_problem(entry)
            if problem is not None:
                raise ValueError(f"'{entry}' {problem}")
        return value


def _pip_problem(entry: str) -> str | None:
    """Why a pip entry is not a plain requirement, or None.

    Ray writes the entries into a requirements file, one a line: an option
    there (`-r FILE`, `--index-url`, `-e PATH`) or a line break would make
    pip read files or trust indexes the spec's reviewer never saw."""
    if entry.startswith("-"):
        return "is a pip option; only requirements are allowed"
    if _PIP_REQUIREMENT_START.match(entry) is None:
        return "must start with a project name (no local paths)"
    if any(char in entry for char in "\n\r\0"):
        return "must be one line"
    if _URL_WITH_CREDENTIALS.search(entry):
        return "holds a URL with credentials; a spec is no place for secrets"
    if "file:" in entry:
        return "names a local file; only requirements from an index or a remote URL are allowed"
    return None


_BackendKeys = create_model(
    "_BackendKeys",
    __base__=_Spec,
    **_file_keys(
        BackendConfig,
        DERIVED_BACKEND_FIELDS,
        {
            "init_args": list[Any],
            "uses": list[str],
            "ray_actor_options": RayActorOptionsSpec,
            "placement": PlacementSpec | None,
            "protocol": _one_of(BackendProtocol) | None,
            "v2": V2Spec | None,
            "llm": LLMSpec | None,
            "runtime_env": RuntimeEnvSpec,
            "autoscaling": AutoscalingSpec | None,
            "batching": BatchingSpec | None,
            "routing": RoutingSpec | None,
            "multiplex": MultiplexSpec | None,
            "update": UpdateSpec | None,
            "secrets": list[str],
            "models": list[str],
            "on_secret_change": _one_of(SecretChange) | None,
        },
    ),
)


class BackendSpec(_BackendKeys):  # type: ignore[misc,valid-type]  # create_model builds it: a variable to mypy
    """A `[backends.NAME]` table: a `BackendConfig` as a file writes it."""

    code_paths: list[str] | None = Field(
        default=None,
        description="Paths (from the repository root) whose files make up the code; "
        "default: the imported module's folder. Under the spec path only Python files count: "
        "spec files never change a version.",
    )
    version: str | None = Field(
        default=None, description="The code's version, when set by hand; default: derived from the code paths."
    )
    import_path: str | None = Field(  # a file may leave it to [llm]
        default=None, description=BackendConfig.model_fields["import_path"].description
    )

    _multiplex_alone = model_validator(mode="after")(multiplex_alone)
    _placement_fits_actor = model_validator(mode="after")(placement_fits_actor)
    _v2_fits_backend = model_validator(mode="after")(v2_fits_backend)
    _llm_or_import_path = model_validator(mode="after")(llm_or_import_path)

    @field_validator("import_path")
    @classmethod
    def _import_path_shape(cls, value: str | None) -> str | None:
        if value is not None and _IMPORT_PATH.fullmatch(value) is None:
            raise ValueError(f"must look like 'package.module:attribute' (got '{value}')")
        return value

    @field_validator("version")
    @classmethod
    def _version_shape(cls, value: str | None) -> str | None:
        if value is not None and _VERSION.fullmatch(value) is None:
            raise ValueError(
                f"must be 1-64 letters, digits, '.', '_', '+' or '-' (got '{value}')"
            )
        return value

    @field_validator("code_paths")
    @classmethod
    def _code_paths_relative(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        return [_normalise_code_path(path) for path in value]

    @field_validator("secrets", "models")
    @classmethod
    def _secrets_once(cls, value: list[str]) -> list[str]:
        twice = sorted({name for name in value if value.count(name) > 1})
        if twice:
            raise ValueError(f"names '{twice[0]}' twice")
        return value

    def can_have_zero_replicas(self) -> bool:
        return zero_replica_reason(self) is not None

    def replica_target(self) -> int:
        """Replicas to start with: autoscaled backends start at their minimum."""
        return self.autoscaling.min_replicas if self.autoscaling else self.num_replicas

    def runs(self) -> str:
        """The import path its replicas run: its own, or the built-in OpenAI app's for an [llm] backend."""
        return BUILTIN_APP if self.import_path is None else self.import_path


def _normalise_code_path(path: str) -> str:
    parts = [part for part in path.replace("\\", "/").split("/") if part not in ("", ".")]
    if path.startswith("/") or ".." in parts or not parts:
        raise ValueError(f"must be relative paths inside the repository (got '{path}')")
    return "/".join(parts)


_EndpointKeys = create_model(
    "_EndpointKeys",
    __base__=_Spec,
    **_file_keys(
        EndpointConfig,
        DERIVED_ENDPOINT_FIELDS,
        {
            "methods": list[str],
            "traffic": dict[str, Fraction],
            "shadow": dict[str, ShadowFraction],
            "match": list[MatchSpec],  # type: ignore[valid-type]  # create_model builds it: a variable to mypy
            "shadow_compare": _one_of(ShadowCompare),
            "shadow_ignore": list[str],
            "grpc_streaming": list[Annotated[str, AfterValidator(grpc_method_name)]],
            "rollout": RolloutSpec | None,
            "limits": LimitsSpec | None,
            "tracing": TracingSpec | None,
            "capture": CaptureSpec | None,
            "retries": RetriesSpec | None,
            "outliers": OutliersSpec | None,
            "circuit": CircuitSpec | None,
        },
    ),
)


class EndpointSpec(_EndpointKeys):  # type: ignore[misc,valid-type]  # create_model builds it: a variable to mypy
    """An `[endpoints.NAME]` table: an `EndpointConfig` as a file writes it."""

    _streaming_of_a_service = model_validator(mode="after")(streaming_methods_of_a_service)

    @field_validator("route")
    @classmethod
    def _route_shape(cls, value: str) -> str:
        problem = route_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("methods")
    @classmethod
    def _methods_known(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("must not be empty")
        unknown = [method for method in value if method not in HTTP_METHODS]
        if unknown and unknown[0].upper() in HTTP_METHODS:
            raise ValueError(f"'{unknown[0]}' must be upper case ('{unknown[0].upper()}')")
        if unknown:
            raise ValueError(
                f"'{unknown[0]}' is not an HTTP method (one of {', '.join(sorted(HTTP_METHODS))})"
            )
        if len(set(value)) != len(value):
            raise ValueError("must not list a method twice")
        return value

    @field_validator("traffic")
    @classmethod
    def _traffic_not_empty(cls, value: dict[str, float]) -> dict[str, float]:
        if not value:
            raise ValueError("must send traffic to at least one backend")
        return value


SecretSpec = create_model(
    "SecretSpec",
    __base__=_Spec,
    __doc__=SecretConfig.__doc__,
    **_file_keys(SecretConfig, DERIVED_SECRET_FIELDS, {}),
)


ModelSpec = create_model(
    "ModelSpec",
    __base__=_Spec,
    __doc__=ModelConfig.__doc__,
    **_file_keys(ModelConfig, DERIVED_MODEL_FIELDS, {"include": list[str], "exclude": list[str]}),
)


def literal_credential(name: str, value: str) -> str | None:
    """Why an environment variable holds a credential in plain text, or None:
    a name like *PASSWORD*, *TOKEN*, *SECRET* or *_KEY with a literal value,
    or any value holding a URL with a password (`postgres://app:pw@host/db`)."""
    if _URL_PASSWORD.search(value or "") is not None:
        return (
            f"'{name}' holds a URL with a password in it (scheme://user:PASSWORD@host): plain text in git, "
            "in Ray and in every plan; declare the URL as [secrets.NAME] with an age-encrypted file and list it "
            "in the backend's secrets (docs/guides/secrets.md)"
        )
    if _CREDENTIAL_NAME.fullmatch(name) is None or not value:
        return None
    return (
        f"'{name}' looks like a credential with its value written in the spec (plain text in git, "
        "in Ray and in every plan); declare it as [secrets.NAME] with an age-encrypted file and list it "
        "in the backend's secrets (docs/guides/secrets.md)"
    )


# --- checking one table --------------------------------------------------------

Loc = tuple[str | int, ...]
_S = TypeVar("_S", bound=_Spec)


@dataclass(frozen=True)
class Problem:
    """One thing wrong in a table; `loc` is the key path inside the table.
    `at_value`: the value written at `loc` is wrong (a type, a range, not one
    of the allowed values), so it is located at the value, not at its key."""

    loc: Loc
    message: str
    at_value: bool = False


def check_backend(
    raw: Any, at: Loc, max_replicas: int = DEFAULT_MAX_REPLICAS
) -> tuple[BackendSpec | None, tuple[Problem, ...]]:
    """Validate the `[backends.NAME]` table found at key path `at`; the spec
    is returned only when the table has no problem. Replica counts above
    `max_replicas` (the agent's `--max-replicas`) are problems too."""
    return _check(BackendSpec, raw, at, _backend_rules(raw, at) + _replica_cap(raw, at, max_replicas))


def check_endpoint(raw: Any, at: Loc) -> tuple[EndpointSpec | None, tuple[Problem, ...]]:
    return _check(EndpointSpec, raw, at, _endpoint_rules(raw, at))


def check_secret(raw: Any, at: Loc) -> tuple[Any, tuple[Problem, ...]]:
    """A `[secrets.NAME]` table: its `file` is a relative path inside the repository."""
    rules: tuple[Problem, ...] = ()
    if isinstance(raw, Mapping) and isinstance(raw.get("file"), str):
        try:
            _normalise_code_path(raw["file"])
        except ValueError:
            where = (*at, "file")
            message = f"{dotted(where)}: must be a relative path inside the repository (got {_short(raw['file'])})"
            rules = (Problem(where, message, at_value=True),)
    spec, problems = _check(SecretSpec, raw, at, rules)
    if spec is not None:
        spec = spec.model_copy(update={"file": _normalise_code_path(spec.file)})  # type: ignore[attr-defined]  # create_model builds SecretSpec: its fields are unknown to mypy
    return spec, problems


# The keys only some sources take: the Hub's globs, and a registry's or the Hub's credentials.
_ONLY = {"include": ("hf://",), "exclude": ("hf://",), "token_secret": ("hf://", "oci://")}


def check_model(raw: Any, at: Loc) -> tuple[Any, tuple[Problem, ...]]:
    """A `[models.NAME]` table: a source every node can fetch and a sha256 digest;
    `include` and `exclude` only for an hf:// source, `token_secret` for an hf:// or oci:// one."""
    rules: list[Problem] = []
    if isinstance(raw, Mapping):
        for key, why in (
            ("source", source_problem(raw["source"]) if isinstance(raw.get("source"), str) else None),
            ("sha256", digest_problem(raw["sha256"]) if isinstance(raw.get("sha256"), str) else None),
        ):
            if why is not None:
                where = (*at, key)
                got = f" (got {_short(raw[key])})" if key == "sha256" else ""
                rules.append(Problem(where, f"{dotted(where)}: {why}{got}", at_value=True))
        source = raw.get("source")
        if isinstance(source, str):
            for key, schemes in _ONLY.items():
                if key in raw and not source.startswith(schemes):
                    where = (*at, key)
                    takes = " or ".join(f"an {scheme}" for scheme in schemes)
                    rules.append(Problem(where, f"{dotted(where)}: only {takes} source takes {key}"))
        for key in ("include", "exclude"):
            globs = raw.get(key)
            for index, glob in enumerate(globs if isinstance(globs, list) else ()):
                if isinstance(glob, str) and (not glob or "\0" in glob):
                    where = (*at, key, index)
                    rules.append(Problem(where, f"{dotted(where)}: must be a non-empty glob", at_value=True))
    return _check(ModelSpec, raw, at, tuple(rules))


def _check(
    model: type[_S], raw: Any, at: Loc, rules: tuple[Problem, ...]
) -> tuple[_S | None, tuple[Problem, ...]]:
    try:
        spec = model.model_validate(raw)
    except ValidationError as error:
        return None, tuple(_describe(detail, at, model) for detail in error.errors()) + rules
    return (None if rules else spec), rules


def _backend_rules(raw: Any, at: Loc) -> tuple[Problem, ...]:
    """Rules between keys, checked on the raw table so they are reported
    together with type errors elsewhere in the same table."""
    if not isinstance(raw, Mapping):
        return ()
    problems: list[Problem] = []
    env = raw.get("runtime_env")
    variables = env.get("env_vars") if isinstance(env, Mapping) else None
    for name, value in (variables or {}).items() if isinstance(variables, Mapping) else ():
        why = literal_credential(name, value) if isinstance(name, str) and isinstance(value, str) else None
        if why is not None:
            where = (*at, "runtime_env", "env_vars", name)
            problems.append(Problem(where, f"{dotted(where)}: {why}"))
    scaling = raw.get("autoscaling")
    if isinstance(scaling, Mapping) and "num_replicas" in raw:
        problems.append(
            Problem((*at, "num_replicas"), f"{dotted(at)}: num_replicas cannot be combined with [autoscaling]")
        )
    if isinstance(scaling, Mapping):
        low = scaling.get("min_replicas", AutoscalingSpec.model_fields["min_replicas"].default)
        high = scaling.get("max_replicas")
        if _is_int(low) and _is_int(high) and low > high:
            where = (*at, "autoscaling")
            problems.append(
                Problem(where, f"{dotted(where)}: min_replicas ({low}) must be <= max_replicas ({high})")
            )
    return tuple(problems)


def _endpoint_rules(raw: Any, at: Loc) -> tuple[Problem, ...]:
    if not isinstance(raw, Mapping) or "shadow_ignore" not in raw:
        return ()
    if raw.get("shadow_compare") == ShadowCompare.JSON.value:
        return ()
    where = (*at, "shadow_ignore")
    return (Problem(where, f"{dotted(where)}: only a json comparison ignores keys; set shadow_compare = \"json\""),)


def _replica_cap(raw: Any, at: Loc, max_replicas: int) -> tuple[Problem, ...]:
    if not isinstance(raw, Mapping):
        return ()
    scaling = raw.get("autoscaling")
    counts = [((*at, "num_replicas"), raw.get("num_replicas"))]
    if isinstance(scaling, Mapping):
        counts.append(((*at, "autoscaling", "max_replicas"), scaling.get("max_replicas")))
    return tuple(
        Problem(loc, f"{dotted(loc)}: {count} is above this agent's --max-replicas ({max_replicas})", at_value=True)
        for loc, count in counts
        if _is_int(count) and count > max_replicas
    )


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


_MESSAGES = {
    "int_type": "must be an integer",
    "float_type": "must be a number",
    "finite_number": "must be a finite number",
    "string_type": "must be a string",
    "list_type": "must be an array",
    "dict_type": "must be a table",
    "model_type": "must be a table",
    "model_attributes_type": "must be a table",
}


def _literal_text(ctx: Mapping[str, Any]) -> str:
    return f"must be {ctx['expected']}"


def _describe(detail: ErrorDetails, at: Loc, model: type[BaseModel] | None = None) -> Problem:
    loc = (*at, *detail["loc"])
    kind, ctx = detail["type"], detail.get("ctx", {})
    if kind == "extra_forbidden":
        known = known_keys(model, tuple(detail["loc"][:-1])) if model is not None else ()
        return Problem(loc, f"{dotted(loc[:-1])}: unknown key '{loc[-1]}'{did_you_mean(loc[-1], known)}")
    if kind == "missing":
        return Problem(loc, f"{dotted(loc[:-1])}: missing required key '{loc[-1]}'")
    if kind == "value_error":
        return Problem(loc, f"{dotted(loc)}: {ctx['error']}")  # a rule's own words say what and where
    if kind == "literal_error":
        got = detail["input"]
        hint = did_you_mean(got, _QUOTED.findall(str(ctx.get("expected", "")))) if isinstance(got, str) else ""
        return Problem(loc, f"{dotted(loc)}: {_literal_text(ctx)} (got {_short(got)}){hint}", at_value=True)
    bound = next((f"{op} {_number(ctx[key])}" for key, op in _BOUNDS if key in ctx), None)
    text = f"must be {bound}" if bound else _MESSAGES.get(kind, detail["msg"])
    return Problem(loc, f"{dotted(loc)}: {text} (got {_short(detail['input'])})", at_value=True)


_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'")


def did_you_mean(word: object, known: Any) -> str:
    """` (did you mean 'X'?)` for the known word closest to `word`, or nothing."""
    if not isinstance(word, str) or not word or len(word) > 100:  # a hostile key costs no search
        return ""
    close = difflib.get_close_matches(word, [str(item) for item in known], n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def known_keys(model: type[BaseModel], path: tuple[str | int, ...]) -> tuple[str, ...]:
    """The keys the spec format allows in the table at `path` inside a `model`
    table (read from its JSON schema; none where the table is free-form)."""
    schema = _schema_of(model)
    node: Any = schema
    for part in path:
        node = _table_schema(schema, node, isinstance(part, int))
        if node is None:
            return ()
        if isinstance(part, int):
            node = node.get("items")
        else:
            properties = node.get("properties", {})
            node = properties.get(part, node.get("additionalProperties"))
        if not isinstance(node, dict):
            return ()
    found = _table_schema(schema, node, False)
    return tuple(found.get("properties", {})) if found is not None else ()


@functools.cache
def _schema_of(model: type[BaseModel]) -> dict[str, Any]:
    return model.model_json_schema()


def _table_schema(root: dict[str, Any], node: Any, array: bool) -> dict[str, Any] | None:
    """`node` with its `$ref` followed and its `anyOf` (optional values) narrowed
    to the branch that is a table (or, for `array`, an array)."""
    for _ in range(8):  # references never chain this deep in the spec's schema
        if not isinstance(node, dict):
            return None
        if "$ref" in node:
            node = root.get("$defs", {}).get(str(node["$ref"]).rsplit("/", 1)[-1])
        elif "anyOf" in node:
            wanted = "array" if array else "object"
            branches = [_table_schema(root, branch, array) for branch in node["anyOf"]]
            node = next((b for b in branches if b is not None and (b.get("type") == wanted or "properties" in b)), None)
        else:
            return node
    return None


_BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))


def dotted(loc: Loc) -> str:
    """A key path as a reader writes it: `backends.echo.init_args[0]`."""
    text = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)
    return text.removeprefix(".") or "file"


def _number(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _short(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a table"
    text = repr(value) if not isinstance(value, bool) else str(value).lower()
    return text if len(text) <= 40 else text[:37] + "..."
