"""The goal API's vocabulary: backend, endpoint and serving-state values.

These frozen models are what the agent asks for (its desired state), what
the controller stores, checkpoints as JSON and reports back (the actual
state), and what the proxy receives by long poll. They are plain values: no
Ray, no git, no I/O.

Each field is declared here once, with its default, its range and a
`description` (what a user reads about the spec key of the same name). The
spec file format (`gitops.specs.models`) derives its tables from these
models and adds only file concerns: strict TOML typing, unknown keys
rejected, keys a file may leave out (`version`) or that only a file has
(`code_paths`).

Comparison rules live here so that every component agrees on them:
`BackendConfig.code_identity()` says what forces a restart, and
`BackendConfig.comparable()` is what the planner diffs.
"""

from __future__ import annotations

import enum
import re
from typing import Annotated, Any, Sequence

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from vocabulary.serving_rules import refused_traffic_reason, zero_replica_reason

__all__ = [
    "AutoscalingConfig",
    "TracingConfig",
    "CaptureConfig",
    "DEFAULT_MAX_BODY_BYTES",
    "MAX_BODY_BYTES_CEILING",
    "BatchingConfig",
    "RoutingPolicy",
    "RoutingKey",
    "RoutingConfig",
    "keyed_routing",
    "MultiplexConfig",
    "multiplex_alone",
    "UpdateConfig",
    "OnFailure",
    "MetricCheck",
    "bounded_check",
    "RolloutConfig",
    "MatchRule",
    "LimitsConfig",
    "one_match_source",
    "ShadowCompare",
    "StickyKey",
    "SOURCE_FIELDS",
    "ENVIRONMENT_OVERRIDABLE",
    "SecretChange",
    "SecretConfig",
    "ModelConfig",
    "BackendConfig",
    "EndpointConfig",
    "ServingState",
    "GoalState",
    "GoalResult",
    "ReplicaState",
    "ReplicaInfo",
    "ReplicaSet",
    "RouteEntry",
    "RouteTable",
]

# Where a backend's config came from, not what it is: never compared, never
# a reason to restart or update (set by the agent on each create or update).
SOURCE_FIELDS = frozenset({"working_dir", "commit"})

# A field declared with `json_schema_extra=ENVIRONMENT_OVERRIDABLE` may be set
# per environment (`environments/NAME.toml`, `gitops.specs.environments`);
# any other key there is an error. One declaration, one schema.
ENVIRONMENT_OVERRIDABLE: dict[str, Any] = {"x-environment": True}


class _Value(BaseModel):
    # Numbers are finite everywhere: configs travel as JSON, and Ray rejects inf and nan.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class AutoscalingConfig(_Value):
    """A backend's replica count bounds and the load the autoscaler aims for."""

    min_replicas: int = Field(
        default=1, ge=0, description="Fewest replicas the autoscaler keeps; 0 lets an idle backend stop."
    )
    max_replicas: int = Field(ge=1, description="Most replicas the autoscaler starts.")
    target_ongoing_requests: float = Field(
        default=2.0, gt=0, description="Requests in flight per replica the autoscaler aims for."
    )
    upscale_delay_s: float = Field(
        default=5.0, ge=0, description="Seconds the load must stay above target before adding replicas."
    )
    downscale_delay_s: float = Field(
        default=30.0, ge=0, description="Seconds the load must stay below target before removing replicas."
    )
    target_reported_load: float | None = Field(
        default=None,
        gt=0,
        description="Load per replica the autoscaler aims for, as replicas report it with "
        "`ray_gitops.serving.report_load` (KV-cache use, queue depth); the count is the larger of what requests "
        "and reported load want. none: requests only.",
    )


class BatchingConfig(_Value):
    """How requests to a batched backend are grouped into one handler call."""

    max_batch_size: int = Field(
        default=8, ge=1, description="Most requests one handler call receives (as a list); changed in place."
    )
    batch_wait_timeout_s: float = Field(
        default=0.01,
        ge=0,
        description="Seconds the first request of a batch waits for more before the batch is sent; changed in place.",
    )


class RoutingPolicy(str, enum.Enum):
    """How the proxy chooses a backend's replica for each request."""

    POWER_OF_TWO = "power_of_two"  # the less busy of two random replicas
    ROUND_ROBIN = "round_robin"  # each replica in turn
    LEAST_LOADED = "least_loaded"  # the replica with the fewest requests in flight
    CONSISTENT_HASH = "consistent_hash"  # rendezvous hashing of the request's key
    PREFIX_AFFINITY = "prefix_affinity"  # requests sharing a key prefix go to one replica


class RoutingKey(str, enum.Enum):
    """Where a routing policy reads the request's key."""

    HEADER = "header"
    COOKIE = "cookie"
    QUERY = "query"
    JSON = "json"


_ROUTING_KEY = re.compile(r"(header|cookie|query|json):(.+)")
_KEYED_POLICIES = frozenset({RoutingPolicy.CONSISTENT_HASH, RoutingPolicy.PREFIX_AFFINITY})


def _routing_key_shape(key: str | None) -> str | None:
    if key is None:
        return None
    found = _ROUTING_KEY.fullmatch(key)
    if found is None or not found.group(2).strip() or any(c in found.group(2) for c in "\r\n\0"):
        raise ValueError(f"must be 'header:NAME', 'cookie:NAME', 'query:NAME' or 'json:FIELD' (got '{key}')")
    kind, name = found.groups()
    if kind == "header":
        if re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+", name) is None:
            raise ValueError(f"'{name}' is not an HTTP header name")
        return f"header:{name.lower()}"
    return key


def keyed_routing(routing: Any) -> Any:
    """A hashing policy needs a key, and only a hashing policy reads one; the
    spec table (`gitops.specs.models`) applies this rule too."""
    policy = RoutingPolicy(routing.policy)
    if policy in _KEYED_POLICIES and routing.key is None:
        raise ValueError(f"policy '{policy.value}' needs a key ('header:NAME', 'cookie:NAME', 'query:NAME' or 'json:FIELD')")
    if policy not in _KEYED_POLICIES and routing.key is not None:
        raise ValueError(f"policy '{policy.value}' reads no key (only consistent_hash and prefix_affinity do)")
    return routing


class RoutingConfig(_Value):
    """How the proxy chooses among a backend's replicas (docs/guides/llm.md)."""

    policy: RoutingPolicy = Field(
        default=RoutingPolicy.POWER_OF_TWO,
        description="power_of_two (the less busy of two random replicas), round_robin, least_loaded, "
        "consistent_hash (a key stays on one replica) or prefix_affinity (requests sharing a key prefix "
        "go to one replica unless it is overloaded); changed in place.",
    )
    key: Annotated[str | None, AfterValidator(_routing_key_shape)] = Field(
        default=None,
        description="consistent_hash and prefix_affinity: 'header:NAME', 'cookie:NAME', 'query:NAME' or "
        "'json:FIELD' (a top-level field of a JSON body); a request without it is routed by power_of_two.",
    )
    prefix_bytes: int = Field(
        default=1024,
        ge=1,
        le=1_048_576,
        description="prefix_affinity: how many bytes of the key's serialised value (compact JSON for json:) "
        "make up the prefix.",
    )
    max_imbalance: float = Field(
        default=2.0,
        ge=1.0,
        le=1000.0,
        description="prefix_affinity: leave the preferred replica when its in-flight count exceeds "
        "the least loaded replica's (counted as at least 1) times this.",
    )

    _keyed = model_validator(mode="after")(keyed_routing)

    def key_source(self) -> tuple[RoutingKey, str] | None:
        """Where the key is read: (header, cookie, query or json, its name)."""
        if self.key is None:
            return None
        kind, name = self.key.split(":", 1)
        return RoutingKey(kind), name


_MODEL_HEADER = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")


def _model_header(name: str) -> str:
    if _MODEL_HEADER.fullmatch(name) is None:
        raise ValueError(f"must be an HTTP header name (letters, digits, '-'...; got {name!r})")
    return name


class MultiplexConfig(_Value):
    """Many models per replica (docs/guides/models.md): a request names its model in a header, the
    replica's `@ray_gitops.serving.multiplexed` loader keeps the most recently used ones loaded,
    and the proxy sends a model to a replica that has it loaded."""

    max_models_per_replica: int = Field(
        default=4,
        ge=1,
        le=10_000,
        description="Most models one replica keeps loaded; loading one more evicts the least recently used. "
        "A change restarts the replicas.",
    )
    header: Annotated[str, AfterValidator(_model_header)] = Field(
        default="X-Model-Id",
        description="The request header naming the model (read by `ray_gitops.serving.model_id()`); "
        "a request without it is routed as usual and its handler's model_id() is None.",
    )

    def header_key(self) -> bytes:
        """The header's name as requests carry it (ASGI: lower-case bytes)."""
        return self.header.lower().encode("latin-1")


def multiplex_alone(backend: Any) -> Any:
    """A multiplexed backend routes by its model header: no `routing` table, no batching
    (a batch mixes models). The spec table (`gitops.specs.models`) applies this rule too."""
    if getattr(backend, "multiplex", None) is not None:
        if backend.routing is not None:
            raise ValueError("multiplex and routing cannot both be set: a multiplexed backend routes by its model")
        if backend.batching is not None:
            raise ValueError("multiplex and batching cannot both be set: a batch would mix models")
    return backend


def _surge_or_unavailable(update: Any) -> Any:
    """A rolling update must be able to make progress: some spare or some gap."""
    if update is not None and update.max_surge == 0 and update.max_unavailable == 0:
        raise ValueError(
            "max_surge and max_unavailable cannot both be 0 "
            "(max_surge = 0 with max_unavailable = 1 replaces replicas in place, one at a time)"
        )
    return update


class UpdateConfig(_Value):
    """How a backend's replicas are replaced when its code changes."""

    max_surge: int = Field(
        default=1, ge=0, description="Replicas started beyond the target while updating; 0: replace in place."
    )
    max_unavailable: int = Field(
        default=0, ge=0, description="Replicas that may be missing from the target while updating."
    )


class SecretChange(str, enum.Enum):
    """What a commit that changes only a backend's secrets does to its replicas."""

    RECONFIGURE = "reconfigure"  # in place: new values delivered, the class's reconfigure_secrets() called
    RESTART = "restart"  # a rolling restart, as for new code


class SecretConfig(_Value):
    """An age-encrypted value in the repository (docs/guides/secrets.md): only its
    file is named here, never its value."""

    name: str = Field(description="The secret's name: the key of its [secrets.NAME] table.")
    file: str = Field(
        description="Path (from the repository root) of the age-encrypted file holding the value "
        "(binary or ASCII-armored)."
    )


class ModelConfig(_Value):
    """Weights pinned by digest (docs/guides/models.md): fetched once per node into a
    content-addressed cache before a replica that needs them starts."""

    name: str = Field(description="The model's name: the key of its [models.NAME] table.")
    source: str = Field(
        description="Where every node fetches it: s3://bucket/key, s3://bucket/prefix/ (a directory), "
        "https://host/file or file:///path (on every node); S3 credentials and endpoint come from the "
        "node's AWS_* variables, never from git."
    )
    sha256: str = Field(
        description="A single file: its sha256; a directory: the sha256 of its manifest (sorted "
        "\"path\\tsize\\tsha256\\n\" lines). `gitops models digest PATH|URL` prints it."
    )
    load_timeout_s: float = Field(
        default=600.0,
        gt=0,
        description="Seconds fetching and verifying may take on a node; health checks start after it.",
    )


class BackendConfig(_Value):
    """One backend as the controller runs it.

    `version` identifies the code; replicas restart exactly when it changes.
    `working_dir` is where this version's code can be fetched from; any
    export with the same version holds the same code, so it never causes a
    restart on its own and is left out of comparisons.
    """

    name: str = Field(description="The backend's name: the key of its [backends.NAME] table.")
    version: str = Field(
        description="What the replicas' code is: the spec's `version`, else a hash of the code paths and code fields."
    )
    import_path: str = Field(
        description="`package.module:attribute` of the class or function that handles requests, "
        "resolved from the repository root."
    )
    init_args: tuple[Any, ...] = Field(
        default=(), description="Positional arguments for the class's constructor (a class only)."
    )
    init_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments for the class's constructor (a class only).",
        json_schema_extra=ENVIRONMENT_OVERRIDABLE,
    )
    num_replicas: int = Field(
        default=1, ge=0, description="Replicas to run; not together with [autoscaling], which starts at its minimum.",
        json_schema_extra=ENVIRONMENT_OVERRIDABLE,
    )
    max_concurrent_queries: int = Field(
        default=100, ge=1, description="Requests one replica handles at once; more wait in the proxy.",
        json_schema_extra=ENVIRONMENT_OVERRIDABLE,
    )
    user_config: Any = Field(
        default=None, description="Any value, passed to the replica's `reconfigure()`; a change restarts nothing.",
        json_schema_extra=ENVIRONMENT_OVERRIDABLE,
    )
    graceful_shutdown_timeout_s: float = Field(
        default=20.0, ge=0, description="Seconds a stopping replica may finish its requests before it is killed.",
        json_schema_extra=ENVIRONMENT_OVERRIDABLE,
    )
    health_check_period_s: float = Field(
        default=10.0, gt=0, description="Seconds between two health checks of a replica.",
        json_schema_extra=ENVIRONMENT_OVERRIDABLE,
    )
    health_check_timeout_s: float = Field(
        default=30.0, gt=0, description="Seconds a health check may take before the replica is replaced.",
        json_schema_extra=ENVIRONMENT_OVERRIDABLE,
    )
    startup_timeout_s: float | None = Field(
        default=None, gt=0,
        description="Seconds a replica's constructor may take (after its models are staged) before the replica "
        "is given up and replaced; three in a row fail the apply. None: the controller's 60.",
        json_schema_extra=ENVIRONMENT_OVERRIDABLE,
    )
    ray_actor_options: dict[str, Any] = Field(
        default_factory=dict,
        description="Resources of each replica's Ray actor: num_cpus, num_gpus, memory (bytes), resources.",
        json_schema_extra=ENVIRONMENT_OVERRIDABLE,
    )
    runtime_env: dict[str, Any] = Field(
        default_factory=dict, description="The replicas' Ray runtime environment: env_vars and pip packages.",
        json_schema_extra=ENVIRONMENT_OVERRIDABLE,
    )
    autoscaling: AutoscalingConfig | None = Field(
        default=None, description="Scale the replica count with load, within bounds; none: a fixed count.",
        json_schema_extra=ENVIRONMENT_OVERRIDABLE,
    )
    cold_start_timeout_s: float | None = Field(
        default=None,
        gt=0,
        description="With [autoscaling] min_replicas = 0: requests may be routed here and wait this long "
        "for a first replica to start (then 503); none: traffic needs a replica to exist.",
        json_schema_extra=ENVIRONMENT_OVERRIDABLE,
    )
    batching: BatchingConfig | None = Field(
        default=None,
        description="The handler receives list[Request] and returns a list of the same length; none: one request a call.",
        json_schema_extra=ENVIRONMENT_OVERRIDABLE,
    )
    routing: RoutingConfig | None = Field(
        default=None,
        description="How the proxy chooses a replica for each request; none: power_of_two, changed in place.",
    )
    multiplex: MultiplexConfig | None = Field(
        default=None,
        description="Many models per replica: the proxy routes a request's model (its `header`) to a replica "
        "that has it loaded (docs/guides/models.md); none: one model set per replica.",
    )
    update: Annotated[UpdateConfig | None, AfterValidator(_surge_or_unavailable)] = Field(
        default=None,
        description="How new code replaces running replicas; none: one extra replica at a time, none missing.",
        json_schema_extra=ENVIRONMENT_OVERRIDABLE,
    )
    uses: tuple[str, ...] = Field(
        default=(),
        description="Backends and endpoints this backend calls through handles (`ray_gitops.serving.handle`): "
        "validation checks the names, and they are created and updated before this backend.",
    )
    secrets: tuple[str, ...] = Field(
        default=(),
        description="Secrets ([secrets.NAME]) delivered to this backend's replicas, read with "
        "`ray_gitops.serving.secret(NAME)` or `ray_gitops.serving.secret_path(NAME)` (docs/guides/secrets.md).",
    )
    on_secret_change: SecretChange | None = Field(
        default=None,
        description="What a commit changing only a secret's value does: reconfigure (in place, calling the "
        "class's reconfigure_secrets() if it has one) or restart (rolling); none: reconfigure when the class "
        "defines reconfigure_secrets(), else restart.",
    )
    secret_digests: dict[str, str] = Field(
        default_factory=dict,
        description="Each delivered secret's keyed hash (HMAC under the agent's own key), by name: "
        "what tells a changed value, never the value.",
    )
    models: tuple[str, ...] = Field(
        default=(),
        description="Models ([models.NAME]) staged on the node before a replica starts, read with "
        "`ray_gitops.serving.model_path(NAME)`; a new digest restarts the replicas (docs/guides/models.md).",
    )
    model_sources: dict[str, ModelConfig] = Field(
        default_factory=dict,
        description="Each named model's source, digest and load timeout, by name: what a replica fetches.",
    )
    working_dir: str | None = Field(
        default=None, description="Where this version's code is fetched from (an export of the applied commit)."
    )
    commit: str | None = Field(
        default=None,
        description="The commit this backend's config was last applied from, for `ray_gitops.serving.context()`.",
    )

    _multiplex_alone = model_validator(mode="after")(multiplex_alone)

    def comparable(self) -> dict[str, Any]:
        """Every field that matters to the cluster, without where it came from
        (`working_dir`, `commit`): a commit that leaves the backend as it was
        changes nothing."""
        return self.model_dump(mode="json", exclude=set(SOURCE_FIELDS))

    def code_identity(self) -> str:
        """What a running replica is bound to: change it and replicas restart."""
        return self.version

    def can_have_zero_replicas(self) -> bool:
        return zero_replica_reason(self) is not None

    def refuses_traffic(self) -> bool:
        """Traffic here could find no replica and no one waiting for one."""
        return refused_traffic_reason(self) is not None


# --- progressive delivery ---------------------------------------------------------


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


class MetricCheck(_Value):
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


class RolloutConfig(_Value):
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


_HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")
_STICKY = re.compile(r"(header|cookie):(.+)")


def _header_name(name: str) -> str:
    if _HEADER_NAME.fullmatch(name) is None:
        raise ValueError(f"'{name}' is not an HTTP header name")
    return name.lower()


def _header_name_or_none(name: str | None) -> str | None:
    return None if name is None else _header_name(name)


def _sticky_shape(key: str | None) -> str | None:
    if key is None:
        return None
    found = _STICKY.fullmatch(key)
    if found is None or _HEADER_NAME.fullmatch(found.group(2)) is None:
        raise ValueError(f"must be 'header:NAME' or 'cookie:NAME' (got '{key}')")
    kind, name = found.groups()
    return f"{kind}:{name.lower()}" if kind == "header" else key


class StickyKey(str, enum.Enum):
    """Where a sticky split reads the key it hashes."""

    HEADER = "header"
    COOKIE = "cookie"


class ShadowCompare(str, enum.Enum):
    """How a shadow's reply is compared with the primary's."""

    NONE = "none"
    STATUS = "status"
    JSON = "json"
    EXACT = "exact"


def one_match_source(rule: Any) -> Any:
    """A match rule reads a header or a JSON field, exactly one; the spec
    table (`gitops.specs.models`) applies this rule too."""
    if (rule.header is None) == (rule.json_field is None):
        raise ValueError("needs exactly one of header and json")
    return rule


class MatchRule(_Value):
    """Requests whose header, or top-level JSON body field, has this exact value go to `backend`, before the weights."""

    model_config = ConfigDict(populate_by_name=True)

    header: Annotated[str | None, AfterValidator(_header_name_or_none)] = Field(
        default=None, description="The request header to read (case-insensitive); or json."
    )
    json_field: str | None = Field(
        default=None,
        alias="json",
        min_length=1,
        description="The top-level field of a JSON request body to read (a string's text, else its compact "
        "JSON, is compared); a body that is not a JSON object matches no json rule.",
    )
    value: str = Field(description="The exact header (or field) value that selects the backend.")
    backend: str = Field(description="The backend that answers matching requests.")

    _one_source = model_validator(mode="after")(one_match_source)


_MIB = 1024 * 1024
# A request body above an endpoint's `max_body_bytes` is 413 at the proxy; the
# ceiling keeps a typo (an extra zero) from letting one request hold gigabytes
# of a proxy worker's memory.
DEFAULT_MAX_BODY_BYTES = 10 * _MIB
MAX_BODY_BYTES_CEILING = 256 * _MIB

_LIMIT_KEY = re.compile(r"(header|cookie|query):(.+)")


def _limit_key_shape(key: str | None) -> str | None:
    if key is None:
        return None
    found = _LIMIT_KEY.fullmatch(key)
    if found is None or not found.group(2).strip() or any(c in found.group(2) for c in "\r\n\0"):
        raise ValueError(f"must be 'header:NAME', 'cookie:NAME' or 'query:NAME' (got '{key}')")
    kind, name = found.groups()
    if kind == "header":
        return f"header:{_header_name(name)}"
    return key


class LimitsConfig(_Value):
    """Requests each tenant may send to the endpoint: a token bucket per key; with N nodes, each node's
    proxies enforce 1/N of it (docs/guides/llm.md)."""

    requests_per_s: float = Field(
        gt=0, le=1_000_000, description="Requests per second each key may send, on average, across the cluster "
        "(each of N nodes' proxies allow 1/N of it); beyond it, 429 with Retry-After."
    )
    burst: int = Field(
        default=1, ge=1, le=1_000_000, description="Requests a key may send at once after being idle (the bucket's "
        "size; each of N nodes' proxies allow 1/N of it, rounded up)."
    )
    key: Annotated[str | None, AfterValidator(_limit_key_shape)] = Field(
        default=None,
        description="Who a tenant is: 'header:NAME', 'cookie:NAME' or 'query:NAME' (hashed, never logged); "
        "requests without it share one bucket; none: one bucket for the whole endpoint.",
    )

    def key_source(self) -> tuple[RoutingKey, str] | None:
        if self.key is None:
            return None
        kind, name = self.key.split(":", 1)
        return RoutingKey(kind), name


class TracingConfig(_Value):
    """An endpoint's traces, when the agent exports them (`gitops run --otlp-endpoint`)."""

    sample: float = Field(
        default=0.01,
        ge=0,
        le=1,
        description="Share of requests traced when their W3C `traceparent` does not say sampled "
        "(head sampling); a sampled `traceparent` is always followed.",
    )


def _redaction_shape(rules: Sequence[str]) -> Sequence[str]:
    for rule in rules:
        kind, _, target = rule.partition(":")
        if kind == "header" and target and all(c.isalnum() or c in "-_" for c in target):
            continue
        if kind == "json" and JSON_PATH.fullmatch(target):
            continue
        raise ValueError(
            f"{rule!r} is neither 'header:NAME' nor 'json:$.key.key' (JSON keys by name, from the document's root)"
        )
    return rules


def _sink_shape(sink: str) -> str:
    if sink.startswith("file:///"):
        return sink
    if sink.startswith("s3://") and sink[len("s3://"):].split("/", 1)[0]:
        return sink
    raise ValueError(
        f"{sink!r}: a capture sink is a directory as 'file:///ABSOLUTE/PATH' or an S3 bucket as 's3://BUCKET/PREFIX'"
    )


# `json:` redaction paths: `$` then one or more `.key` (letters, digits, `_` and `-`).
JSON_PATH = re.compile(r"\$(\.[A-Za-z0-9_-]+)+")


class CaptureConfig(_Value):
    """Sampled request and response records of an endpoint, after redaction (`gitops capture`)."""

    sample: float = Field(default=0.1, ge=0, le=1, description="Share of requests recorded.")
    sink: Annotated[str, AfterValidator(_sink_shape)] = Field(
        description="Where records go: 'file:///DIR', a directory on each proxy's node (JSON Lines, one file "
        "per proxy worker per hour), or 's3://BUCKET/PREFIX' (batched JSON Lines objects; the node's AWS_* "
        "credentials, as for models)."
    )
    max_body_bytes: int = Field(
        default=65536, ge=0, description="Bodies are cut beyond this many bytes (after redaction), and the record "
        "says so."
    )
    redact: Annotated[tuple[str, ...], AfterValidator(_redaction_shape)] = Field(
        default=(),
        description="'header:NAME' (the header's value) and 'json:$.a.b' (that key of a JSON body, request or "
        "response) replaced by \"[redacted]\" before a record leaves the proxy; with json rules a body that is "
        "not JSON is withheld. Authorization, Proxy-Authorization, Cookie and Set-Cookie are always redacted.",
    )


class EndpointConfig(_Value):
    """A route of the proxy and how its requests are shared between backends."""

    name: str = Field(description="The endpoint's name: the key of its [endpoints.NAME] table.")
    route: str = Field(description="Path prefix this endpoint serves; the longest matching prefix wins.")
    methods: tuple[str, ...] = Field(
        default=("GET", "POST"), description="HTTP methods the route accepts (upper case); GET implies HEAD."
    )
    traffic: dict[str, float] = Field(
        description="Backend name -> share of the requests it answers, from 0 to 1; the shares sum to 1.",
        json_schema_extra=ENVIRONMENT_OVERRIDABLE,
    )
    shadow: dict[str, float] = Field(
        default_factory=dict,
        description="Backend name -> share of the requests copied to it; its replies never reach clients.",
        json_schema_extra=ENVIRONMENT_OVERRIDABLE,
    )
    timeout_s: float = Field(
        default=30.0, gt=0, description="Seconds a request may take before the client gets 504.",
        json_schema_extra=ENVIRONMENT_OVERRIDABLE,
    )
    max_body_bytes: int = Field(
        default=DEFAULT_MAX_BODY_BYTES, ge=1, le=MAX_BODY_BYTES_CEILING,
        description="Largest request body the proxy takes for this endpoint, in bytes (at most 256 MiB); "
        "a larger one is answered 413 before any replica sees it.",
    )
    match: tuple[MatchRule, ...] = Field(
        default=(),
        description="Rules on a header or a JSON body field, checked in order before the weights; "
        "the first that matches wins.",
    )
    sticky: Annotated[str | None, AfterValidator(_sticky_shape)] = Field(
        default=None,
        description="'header:NAME' or 'cookie:NAME': requests with the same key go to the same backend; "
        "none: each request is drawn on its own.",
    )
    shadow_compare: ShadowCompare = Field(
        default=ShadowCompare.NONE,
        description="Compare each shadow reply with the primary's: none, status, json or exact (bytes).",
    )
    shadow_ignore: tuple[str, ...] = Field(
        default=(), description="JSON keys left out of a json comparison, at any depth."
    )
    shadow_query: bool = Field(
        default=False,
        description="Copy the request's query string to shadows; false: shadows get the path alone "
        "(a query often carries users' data or keys).",
    )
    shadow_values: bool = Field(
        default=False,
        description="Show the differing values in the mismatch sample; false: a mismatch names the JSON "
        "path and the types only, never a user's data.",
    )
    rollout: RolloutConfig | None = Field(
        default=None, description="Move traffic toward the split in git in checked steps; none: at once.",
        json_schema_extra=ENVIRONMENT_OVERRIDABLE,
    )
    limits: LimitsConfig | None = Field(
        default=None, description="A request rate per tenant (token buckets at the proxy); none: unlimited."
    )

    tracing: TracingConfig | None = Field(
        default=None,
        description="Trace a share of the requests (with `gitops run --otlp-endpoint`); none: only requests "
        "whose `traceparent` says sampled.",
    )

    capture: CaptureConfig | None = Field(
        default=None, description="Record a share of the requests and their answers, redacted; none: nothing."
    )
    rollout_step: int = Field(
        default=0, ge=0,
        description="Set by the controller, never by a file: the 1-based step of the progressive rollout whose "
        "weights `traffic` holds (0: none runs), said by traces and capture records.",
    )

    def backends(self) -> frozenset[str]:
        """Every backend this endpoint sends requests to: by weight, by match or as a shadow."""
        return frozenset(self.traffic) | frozenset(self.shadow) | frozenset(rule.backend for rule in self.match)

    def sticky_key(self) -> tuple[StickyKey, str] | None:
        """Where the sticky key is read: (header or cookie, its name)."""
        if self.sticky is None:
            return None
        kind, name = self.sticky.split(":", 1)
        return StickyKey(kind), name


class ServingState(_Value):
    """A whole serving configuration: desired (from git) or actual (controller)."""

    backends: dict[str, BackendConfig] = Field(default_factory=dict)
    endpoints: dict[str, EndpointConfig] = Field(default_factory=dict)
    # Declared in git only (the agent decrypts them); the controller keeps none.
    secrets: dict[str, SecretConfig] = Field(default_factory=dict)
    # Declared in git; the controller keeps each in its backends' model_sources.
    models: dict[str, ModelConfig] = Field(default_factory=dict)


# --- goals -----------------------------------------------------------------


class GoalState(str, enum.Enum):
    PENDING = "pending"
    MET = "met"
    FAILED = "failed"
    SUPERSEDED = "superseded"


class GoalResult(_Value):
    goal_id: str
    state: GoalState
    reason: str = ""


# --- replicas and the long-poll payloads --------------------------------------


class ReplicaState(str, enum.Enum):
    SHOULD_START = "SHOULD_START"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    SHOULD_STOP = "SHOULD_STOP"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"


class ReplicaInfo(BaseModel):
    """A RUNNING replica as the proxy sees it: its actor name and handle.

    `handle` is a Ray ActorHandle; it is carried as an opaque object so this
    module needs no Ray import.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    replica_id: str
    actor_name: str
    handle: object = None


class ReplicaSet(_Value):
    """Long-poll key `replicas:<backend>`: where a backend's requests may go."""

    backend: str
    max_concurrent_queries: int
    replicas: tuple[ReplicaInfo, ...] = ()
    batching: BatchingConfig | None = None
    # How the proxy chooses among the replicas; None: power_of_two.
    routing: RoutingConfig | None = None
    # Many models per replica: where the model id is read, how many a replica keeps; None: not multiplexed.
    multiplex: MultiplexConfig | None = None
    # Seconds a request may wait for a first replica; None: 503 at once.
    cold_start_timeout_s: float | None = None
    # The commit the backend's config was last applied from (`BackendConfig.commit`).
    commit: str | None = None


class RouteEntry(_Value):
    route: str
    methods: tuple[str, ...]
    endpoint: str


class RouteTable(_Value):
    """Long-poll key `routes`: every endpoint's route, for matching."""

    entries: tuple[RouteEntry, ...] = ()
    # Nodes running proxies: each node's proxies enforce 1/nodes of every `[limits]`.
    nodes: int = 1
