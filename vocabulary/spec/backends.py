"""A backend as the controller runs it (`BackendConfig`) and its tables.

Its replica count bounds and autoscaling target, batching, rolling updates,
the secrets and models it is given, where its replicas run (its
`[placement]` is `spec.placement`'s), the protocol it speaks (its `protocol`
and `[v2]` are `spec.v2`'s), the built-in LLM it serves (its `[llm]` is
`spec.llm`'s), the generated gRPC servicer its class implements
(`grpc_servicer`). Each field is declared here once, with its default, its
range and the description a spec's reader sees.
`BackendConfig.code_identity()` says what forces a restart and
`BackendConfig.comparable()` is what the planner diffs. Its routing and
multiplexing tables are `spec.routing`'s. Values only.
"""

from __future__ import annotations

import enum
import re
from typing import Annotated, Any

from pydantic import AfterValidator, Field, model_validator

from vocabulary.spec.base import ENVIRONMENT_OVERRIDABLE, SOURCE_FIELDS, Value
from vocabulary.spec.llm import LLMConfig
from vocabulary.spec.placement import PlacementConfig
from vocabulary.spec.routing import MultiplexConfig, RoutingConfig, multiplex_alone
from vocabulary.spec.serving_rules import refused_traffic_reason, zero_replica_reason
from vocabulary.spec.v2 import BackendProtocol, V2Config

__all__ = [
    "AutoscalingConfig",
    "BatchingConfig",
    "UpdateConfig",
    "SecretChange",
    "SecretConfig",
    "ModelConfig",
    "BackendConfig",
]


class AutoscalingConfig(Value):
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


class BatchingConfig(Value):
    """How requests to a batched backend are grouped into one handler call."""

    max_batch_size: int = Field(
        default=8, ge=1, description="Most requests one handler call receives (as a list); changed in place."
    )
    batch_wait_timeout_s: float = Field(
        default=0.01,
        ge=0,
        description="Seconds the first request of a batch waits for more before the batch is sent; changed in place.",
    )


def _surge_or_unavailable(update: Any) -> Any:
    """A rolling update must be able to make progress: some spare or some gap."""
    if update is not None and update.max_surge == 0 and update.max_unavailable == 0:
        raise ValueError(
            "max_surge and max_unavailable cannot both be 0 "
            "(max_surge = 0 with max_unavailable = 1 replaces replicas in place, one at a time)"
        )
    return update


class UpdateConfig(Value):
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


class SecretConfig(Value):
    """An age-encrypted value in the repository (docs/guides/secrets.md): only its
    file is named here, never its value."""

    name: str = Field(description="The secret's name: the key of its [secrets.NAME] table.")
    file: str = Field(
        description="Path (from the repository root) of the age-encrypted file holding the value "
        "(binary or ASCII-armored)."
    )


class ModelConfig(Value):
    """Weights pinned by digest (docs/guides/models.md): fetched once per node into a
    content-addressed cache before a replica that needs them starts."""

    name: str = Field(description="The model's name: the key of its [models.NAME] table.")
    source: str = Field(
        description="Where every node fetches it: s3://bucket/key, s3://bucket/prefix/ (a directory), "
        "https://host/file, file:///path (on every node), hf://ORG/NAME@COMMIT (a Hugging Face Hub "
        "repository at a full commit hash: a directory) or oci://REGISTRY/REPO@sha256:DIGEST (an OCI "
        "artifact, or a modelcar image's /models: a directory); S3 credentials and endpoint come from the "
        "node's AWS_* variables, never from git."
    )
    sha256: str = Field(
        description="A single file: its sha256; a directory: the sha256 of its manifest (sorted "
        "\"path\\tsize\\tsha256\\n\" lines), for hf:// of the selected files, for oci:// of the model "
        "directory the image holds. `gitops models digest PATH|URL` prints it (`gitops models resolve` for hf:// "
        "and oci://)."
    )
    load_timeout_s: float = Field(
        default=600.0,
        gt=0,
        description="Seconds fetching and verifying may take on a node; health checks start after it.",
    )
    include: tuple[str, ...] = Field(
        default=(),
        description="hf:// only: globs of the repository's files the model holds (fnmatch, `*` crosses '/', "
        "a pattern ending in '/' takes everything under it); none: every file.",
    )
    exclude: tuple[str, ...] = Field(
        default=(), description="hf:// only: globs of files left out of what `include` selects."
    )
    token_secret: str | None = Field(
        default=None,
        description="hf:// and oci:// only: the [secrets.NAME] holding the Hub token, or the registry's "
        "credentials as USER:PASSWORD (delivered to the replicas of the backends that list the model); none: "
        "for hf://, the node's HF_TOKEN, else its token file (HF_TOKEN_PATH, HF_HOME/token), else no token; "
        "for oci://, an anonymous pull.",
    )


# `package.module:attribute`, as an import path is written.
_SERVICER_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")


def _servicer_path_shape(value: str | None) -> str | None:
    if value is not None and _SERVICER_PATH.fullmatch(value) is None:
        raise ValueError(
            f"must look like 'package.module:add_FooServicer_to_server' (the function generated in a "
            f"*_pb2_grpc.py module), got '{value}'"
        )
    return value


class BackendConfig(Value):
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
        "resolved from the repository root; required unless the backend has an [llm] table (the built-in app)."
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
        description="Seconds a replica's constructor may take (after its models are staged, and counted from when "
        "Ray has its process up) before the replica is given up and replaced; three in a row fail the apply. "
        "None: the controller's 60.",
        json_schema_extra=ENVIRONMENT_OVERRIDABLE,
    )
    ray_actor_options: dict[str, Any] = Field(
        default_factory=dict,
        description="Resources of each replica's Ray actor: num_cpus, num_gpus, memory (bytes), resources, "
        "accelerator_type.",
        json_schema_extra=ENVIRONMENT_OVERRIDABLE,
    )
    placement: PlacementConfig | None = Field(
        default=None,
        description="Bundles of resources each replica reserves as one Ray placement group before it starts "
        "(docs/guides/llm.md); none: the replica's actor reserves its ray_actor_options alone.",
        json_schema_extra=ENVIRONMENT_OVERRIDABLE,
    )
    max_replicas_per_node: int | None = Field(
        default=None, ge=1, le=100,
        description="Most replicas of this backend on one node (counted by where each replica's actor runs); "
        "none: no bound.",
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
    protocol: BackendProtocol | None = Field(
        default=None,
        description="v2: serve the Open Inference Protocol (KServe/Triton v2 REST) over import_path's "
        "predict(inputs) -> outputs, as its [v2] table describes (docs/guides/v2.md); none: import_path handles "
        "each HTTP request.",
    )
    v2: V2Config | None = Field(
        default=None,
        description="With protocol = \"v2\": the model's name, platform, version and input and output tensors.",
    )
    grpc_servicer: Annotated[str | None, AfterValidator(_servicer_path_shape)] = Field(
        default=None,
        description="`package.module:add_FooServicer_to_server` (or `package.module:FooServicer`): the function "
        "protoc's gRPC plugin generates for a service, resolved from the repository root. The class of "
        "import_path is then that service's servicer: its methods are called as grpcio calls a servicer's, with "
        "parsed messages and a context, and the endpoint learns the service's name and which methods stream "
        "(docs/guides/grpc.md); none: gRPC calls go to the class's methods by name, bytes or annotated messages.",
    )
    llm: LLMConfig | None = Field(
        default=None,
        description="Serve an OpenAI-compatible API from a built-in engine (docs/guides/llm.md): no import_path "
        "is written; none: the replicas run import_path.",
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
