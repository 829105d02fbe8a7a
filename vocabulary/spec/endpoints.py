"""An endpoint (`EndpointConfig`): its route, traffic split and the tables of its requests.

Match rules, the sticky key, shadows and their comparison, the per-tenant
`[limits]` (a request rate, a token budget or both), `[tracing]`, `[capture]` and the body limit; its
`[rollout]` table is `spec.rollout_config`'s, its `[retries]`, `[outliers]` and `[circuit]` `spec.traffic_policy`'s.
Its `grpc_service` names the gRPC service it also serves (`grpc_service_name`: a full name), and
`grpc_streaming` that service's methods whose requests stream (`grpc_method_name`: identifiers);
`grpc_methods` is each method's kind (`GrpcMethodKind`) when its backends name a generated servicer,
set by the agent from their `grpc_servicer`, never by a file.
Request keys (`sticky`, `[limits] key`) use the one grammar of `spec.keys`. Values only.
"""

from __future__ import annotations

import enum
import re
from typing import Annotated, Any, Sequence

from pydantic import AfterValidator, ConfigDict, Field, model_validator

from vocabulary.spec.base import ENVIRONMENT_OVERRIDABLE, Value
from vocabulary.spec.keys import KeyKind, LIMIT_KINDS, STICKY_KINDS, header_name, request_key, split_key
from vocabulary.spec.rollout_config import RolloutConfig
from vocabulary.spec.traffic_policy import CircuitConfig, OutliersConfig, RetriesConfig

__all__ = [
    "TracingConfig",
    "CaptureConfig",
    "DEFAULT_MAX_BODY_BYTES",
    "MAX_BODY_BYTES_CEILING",
    "MatchRule",
    "LimitsConfig",
    "one_limit_set",
    "one_match_source",
    "ShadowCompare",
    "EndpointConfig",
    "GrpcMethodKind",
    "grpc_service_name",
    "grpc_method_name",
    "streaming_methods_of_a_service",
]


def _sticky_key(key: str | None) -> str | None:
    return request_key(key, STICKY_KINDS)


def _limit_key(key: str | None) -> str | None:
    return request_key(key, LIMIT_KINDS)


def _header_name_or_none(name: str | None) -> str | None:
    return None if name is None else header_name(name)


# A protobuf full name: dot-separated identifiers (`package.Service`, or `Service` without a package).
_GRPC_SERVICE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def grpc_method_name(name: str) -> str:
    """`name` when it is a gRPC method's name (an identifier, as `SayHello`)."""
    if not name.isidentifier():
        raise ValueError(f"'{name}' is not a gRPC method's name: an identifier, as in 'SayHello'")
    return name


def streaming_methods_of_a_service(endpoint: Any) -> Any:
    """`grpc_streaming` names methods of the endpoint's `grpc_service`, each once: without a service
    no gRPC call reaches the endpoint, so the list would be silently ignored. The spec table
    (`gitops.specs.models`) applies this rule too."""
    methods = list(endpoint.grpc_streaming)
    if methods and endpoint.grpc_service is None:
        raise ValueError("grpc_streaming names methods of the endpoint's gRPC service, and it has none: "
                         "set grpc_service = \"package.Service\" or drop grpc_streaming")
    twice = sorted({method for method in methods if methods.count(method) > 1})
    if twice:
        raise ValueError(f"grpc_streaming names '{twice[0]}' twice")
    return endpoint


def grpc_service_name(name: str | None) -> str | None:
    """`name` when it is a gRPC service's full name as clients call it (`pkg.Service`)."""
    if name is not None and _GRPC_SERVICE.fullmatch(name) is None:
        raise ValueError(
            f"'{name}' is not a gRPC service's full name: dot-separated identifiers, as in 'helloworld.Greeter'"
        )
    return name


class GrpcMethodKind(str, enum.Enum):
    """A gRPC method's kind, as grpcio names its handlers: whether its requests, then its replies, stream."""

    UNARY_UNARY = "unary_unary"
    UNARY_STREAM = "unary_stream"
    STREAM_UNARY = "stream_unary"
    STREAM_STREAM = "stream_stream"

    @property
    def requests_stream(self) -> bool:
        return self in (GrpcMethodKind.STREAM_UNARY, GrpcMethodKind.STREAM_STREAM)


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


class MatchRule(Value):
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


def one_limit_set(limits: Any) -> Any:
    """A `[limits]` table limits something: a request rate, a token budget or both; the spec
    table (`gitops.specs.models`) applies this rule too."""
    if limits.requests_per_s is None and limits.tokens_per_minute is None:
        raise ValueError("needs requests_per_s, tokens_per_minute or both")
    return limits


class LimitsConfig(Value):
    """What each tenant may send to the endpoint: requests (a token bucket per key) and LLM tokens (a budget
    per key); with N nodes, each node's proxies enforce 1/N of each (docs/guides/llm.md)."""

    requests_per_s: float | None = Field(
        default=None, gt=0, le=1_000_000, description="Requests per second each key may send, on average, across "
        "the cluster (each of N nodes' proxies allow 1/N of it); beyond it, 429 with Retry-After; none: no request "
        "rate (a token budget alone)."
    )
    burst: int = Field(
        default=1, ge=1, le=1_000_000, description="Requests a key may send at once after being idle (the bucket's "
        "size; each of N nodes' proxies allow 1/N of it, rounded up)."
    )
    tokens_per_minute: int | None = Field(
        default=None, ge=1, le=1_000_000_000,
        description="LLM tokens (prompt + completion, as the reply's `usage` counts them) each key may spend per "
        "minute across the cluster, up to one minute's worth at once; a request is admitted on an estimate (its "
        "body's bytes / 4, plus its `max_tokens`) and charged its `usage` once answered; beyond it, 429 with "
        "Retry-After and an OpenAI error body; none: tokens are not counted.",
    )
    key: Annotated[str | None, AfterValidator(_limit_key)] = Field(
        default=None,
        description="Who a tenant is: 'header:NAME', 'cookie:NAME' or 'query:NAME' (hashed, never logged); "
        "requests without it share one bucket; none: one bucket for the whole endpoint.",
    )

    _one_limit = model_validator(mode="after")(one_limit_set)

    def key_source(self) -> tuple[KeyKind, str] | None:
        if self.key is None:
            return None
        return split_key(self.key)


class TracingConfig(Value):
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


class CaptureConfig(Value):
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
        "not JSON (or larger than 1 MiB, or nested deeper than 64 levels) is withheld. Credential-looking headers "
        "(a name with auth, key, token, secret, password, session, credential or cookie in it) are always redacted.",
    )


class EndpointConfig(Value):
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
    sticky: Annotated[str | None, AfterValidator(_sticky_key)] = Field(
        default=None,
        description="'header:NAME' or 'cookie:NAME': requests with the same key go to the same backend; "
        "none: each request is drawn on its own.",
    )
    grpc_service: Annotated[str | None, AfterValidator(grpc_service_name)] = Field(
        default=None,
        description="The gRPC service (its full name, 'package.Service') this endpoint also serves on the "
        "proxy's gRPC port (`gitops run --grpc-port`): each call goes to the backend's method of the same "
        "name, with the same traffic split and limits; none: HTTP only, unless its backends name a generated "
        "servicer (`grpc_servicer`), whose service it then serves.",
    )
    grpc_streaming: tuple[Annotated[str, AfterValidator(grpc_method_name)], ...] = Field(
        default=(),
        description="Methods of its grpc_service whose requests stream (client-streaming and bidirectional "
        "calls): their messages are relayed both ways as they come, to a method taking an async iterator "
        "of them; the service's other methods are unary or server-streaming. Not needed when its backends name "
        "their generated servicer (`grpc_servicer`): its methods' kinds are read from it.",
    )
    grpc_methods: dict[str, GrpcMethodKind] = Field(
        default_factory=dict,
        description="Set by the agent, never by a file: each method of its grpc_service and its kind, read "
        "from the generated code its backends name in `grpc_servicer`; a method whose requests stream is "
        "relayed as those grpc_streaming lists are. Empty: no backend names a servicer.",
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
        default=None, description="A request rate and/or an LLM token budget per tenant (token buckets at the proxy); "
        "none: unlimited."
    )

    tracing: TracingConfig | None = Field(
        default=None,
        description="Trace a share of the requests (with `gitops run --otlp-endpoint`); none: only requests "
        "whose `traceparent` says sampled.",
    )

    capture: CaptureConfig | None = Field(
        default=None, description="Record a share of the requests and their answers, redacted; none: nothing."
    )
    retries: RetriesConfig | None = Field(
        default=None,
        description="Try failed requests again on another replica, within a budget (`spec.traffic_policy`); "
        "none: a GET, HEAD or OPTIONS whose replica died or stalled is tried once more.",
    )
    outliers: OutliersConfig | None = Field(
        default=None,
        description="Take replicas that fail far more than their backend's others out of routing for a while "
        "(`spec.traffic_policy`); none: only dead and stalled replicas leave routing.",
    )
    circuit: CircuitConfig | None = Field(
        default=None,
        description="Answer 503 with `Retry-After` before a backend holds too many waiting requests or retries "
        "(`spec.traffic_policy`); none: only the proxy's own bound on a backend's queue.",
    )
    rollout_step: int = Field(
        default=0, ge=0,
        description="Set by the controller, never by a file: the 1-based step of the progressive rollout whose "
        "weights `traffic` holds (0: none runs), said by traces and capture records.",
    )

    _streaming_of_a_service = model_validator(mode="after")(streaming_methods_of_a_service)

    def streaming_requests(self) -> frozenset[str]:
        """The methods of its service whose requests stream: those grpc_streaming lists and those its
        backends' servicer declares so."""
        declared = (name for name, kind in self.grpc_methods.items() if kind.requests_stream)
        return frozenset(self.grpc_streaming) | frozenset(declared)

    def backends(self) -> frozenset[str]:
        """Every backend this endpoint sends requests to: by weight, by match or as a shadow."""
        return frozenset(self.traffic) | frozenset(self.shadow) | frozenset(rule.backend for rule in self.match)

    def sticky_key(self) -> tuple[KeyKind, str] | None:
        """Where the sticky key is read: (header or cookie, its name)."""
        if self.sticky is None:
            return None
        return split_key(self.sticky)
