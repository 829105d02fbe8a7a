"""docs/reference/spec.md from the spec models: every key with type, default, constraints and example.

Types and constraints come from each model's JSON schema, defaults from its
`model_fields`, descriptions from wherever the models carry them (a field's
description, else its schema's, else the model's docstring for a table).
Each key's example is taken from `EXAMPLE`, a complete spec that also opens
the page (and is validated with every other TOML block of docs/); a key
the models gain without an example there fails the generator, so the page
cannot miss one.
"""

from __future__ import annotations

import json
import tomllib
import typing
from typing import Any

from pydantic import BaseModel

from gitops.specs.pins.automation import AutomationSpec
from gitops.specs.models import BackendSpec, EndpointSpec, ModelSpec, SecretSpec

__all__ = ["EXAMPLE", "TABLES", "render_spec"]

HEADER = "<!-- Generated from gitops/specs/models.py by `make docs`; edit the models, not this file. -->\n"

# The top-level tables of a spec file and the model of one entry of each.
TABLES: tuple[tuple[str, str, type[BaseModel]], ...] = (
    ("backends", "[backends.NAME]", BackendSpec),
    ("endpoints", "[endpoints.NAME]", EndpointSpec),
    ("secrets", "[secrets.NAME]", SecretSpec),
    ("models", "[models.NAME]", ModelSpec),
)

EXAMPLE = """\
[backends.echo-v1]
import_path = "deployments.apps.echo:Echo"
init_args = ["v1"]
init_kwargs = { greeting = "hello" }
max_concurrent_queries = 20
user_config = { greeting = "hi" }
graceful_shutdown_timeout_s = 10
health_check_period_s = 5
health_check_timeout_s = 10
startup_timeout_s = 120
code_paths = ["deployments/apps"]
version = "2026-11-01"
ray_actor_options = { num_cpus = 0.5, num_gpus = 0, memory = 1000000000, resources = { model_slot = 1 } }
runtime_env = { env_vars = { LOG_LEVEL = "info" }, pip = ["numpy"] }
uses = ["echo-v2"]
cold_start_timeout_s = 30
secrets = ["db"]
models = ["sentiment"]
on_secret_change = "reconfigure"

[backends.echo-v1.autoscaling]
min_replicas = 1
max_replicas = 4
target_ongoing_requests = 2
upscale_delay_s = 5
downscale_delay_s = 30
target_reported_load = 0.8

[backends.echo-v1.batching]
max_batch_size = 8
batch_wait_timeout_s = 0.01

[backends.echo-v1.routing]
policy = "prefix_affinity"
key = "json:messages"
prefix_bytes = 1024
max_imbalance = 2.0

[backends.echo-v1.update]
max_surge = 1
max_unavailable = 0

[backends.echo-v2]
import_path = "deployments.apps.echo:Echo"
init_args = ["v2"]
num_replicas = 1
max_replicas_per_node = 1
ray_actor_options = { num_gpus = 1, accelerator_type = "A100" }

[backends.echo-v2.placement]
bundles = [{ GPU = 1, CPU = 1 }, { GPU = 1 }]
strategy = "STRICT_PACK"

[backends.echo-v2.multiplex]
max_models_per_replica = 4
header = "X-Model-Id"
models = ["en-fr", "en-de"]
model_pattern = "[a-z]{2}-[a-z]{2}"

[backends.iris]
import_path = "deployments.apps.linear:Linear"
protocol = "v2"
models = ["linear"]

[backends.iris.v2]
name = "iris"
platform = "numpy"
model = "linear"
inputs = [{ name = "x", datatype = "FP32", shape = [-1, 4] }]
outputs = [{ name = "y", datatype = "FP32", shape = [-1, 3] }, { name = "label", datatype = "BYTES", shape = [-1] }]

[backends.greeter]
import_path = "deployments.apps.hello_servicer:Greeter"
init_args = ["v1"]
grpc_servicer = "deployments.apps.helloworld_pb2_grpc:add_GreeterServicer_to_server"

[backends.chat]
models = ["llama", "sql-lora"]

[backends.chat.placement]
bundles = [{ CPU = 1 }, { GPU = 1 }, { GPU = 1 }]
strategy = "STRICT_PACK"

[backends.chat.llm]
engine = "vllm"
model = "llama"
served_model_name = "llama-3.1-8b-instruct"
tensor_parallel_size = 2
max_model_len = 8192
lora_adapters = ["sql-lora"]
max_loras = 4
engine_args = { dtype = "bfloat16", gpu_memory_utilization = 0.9, max_lora_rank = 16 }

[endpoints.echo]
route = "/echo"
methods = ["GET", "POST"]
traffic = { echo-v1 = 1.0 }
shadow = { echo-v2 = 0.1 }
timeout_s = 10
max_body_bytes = 16777216
match = [{ header = "x-canary", value = "always", backend = "echo-v2" }, { json = "model", value = "small", backend = "echo-v2" }]
sticky = "header:x-user-id"
grpc_service = "demo.Echo"
grpc_streaming = ["Chat"]
shadow_compare = "json"
shadow_ignore = ["timestamp"]
shadow_query = false
shadow_values = false

[endpoints.echo.limits]
requests_per_s = 10
burst = 20
tokens_per_minute = 100000
key = "header:authorization"

[endpoints.echo.retries]
attempts = 3
retry_on = ["replica-died", "replica-stalled", "502", "503", "504"]
methods = ["GET", "HEAD"]
non_idempotent = false
budget_percent = 20
min_retries = 3
backoff_s = 0.025
max_backoff_s = 0.25

[endpoints.echo.outliers]
consecutive_errors = 5
success_rate_stdev = 1.9
success_rate_min_requests = 50
success_rate_min_replicas = 5
interval_s = 10
base_ejection_s = 30
max_ejection_percent = 50
replace_after = 3

[endpoints.echo.circuit]
max_pending_requests = 100
max_retries = 3

[endpoints.echo.rollout]
steps = [0.05, 0.25, 0.5, 1.0]
step_interval_s = 30
min_requests = 50
max_error_ratio = 0.01
max_p99_latency_s = 0.5
on_failure = "rollback"

[[endpoints.echo.rollout.metrics]]
name = "error-share"
query = 'sum(rate(gitops_http_requests_total{endpoint="$endpoint",backend="$backend",code=~"5.."}[$interval])) / sum(rate(gitops_http_requests_total{endpoint="$endpoint",backend="$backend"}[$interval]))'
max = 0.01

[endpoints.echo.tracing]
sample = 0.01

[endpoints.echo.capture]
sample = 0.1
sink = "file:///var/lib/gitops/capture"
max_body_bytes = 65536
redact = ["header:x-api-key", "json:$.password", "json:$.card.number"]

[secrets.db]
file = "secrets/db.age"

[secrets.hub-token]
file = "secrets/hub-token.age"

[secrets.registry]
file = "secrets/registry.age"

[models.sentiment]
source = "s3://models/sentiment/2026-11-20/"
sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
load_timeout_s = 600

[models.linear]
source = "s3://models/iris-linear/weights.json"
sha256 = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"
[models.llama]
source = "s3://models/llama-3.1-8b-instruct/"
sha256 = "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752"
load_timeout_s = 1800

[models.sql-lora]
source = "s3://models/llama-3.1-8b-sql-lora/"
sha256 = "3f1c8e2a9b7d6c5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e"

[models.summarizer]
source = "hf://acme/summarizer-small@5d3c0a4f8e1b2c9d7a6f5e4d3c2b1a0f9e8d7c6b"
sha256 = "1b4e28ba2fa1d5a0c7a1b1e1e9a4f8e3c2d1b0a9f8e7d6c5b4a3f2e1d0c9b8a7"
include = ["*.json", "*.safetensors"]
exclude = ["onnx/"]
token_secret = "hub-token"

[models.toxicity]
source = "oci://registry.example.com/acme/toxicity-modelcar@sha256:5025ffc9da2076141d7c9c97d0ee870b9b1d25a62942cfdb3592bc8a9af016fd"
sha256 = "4b495367d7dcf4b2065c2cd0c38ec618bae12150575b88e24f14baac22d4941f"
token_secret = "registry"
"""  # noqa: E501 — a PromQL query, one line as a user writes it


AUTOMATION_EXAMPLE = """\
[automation.sentiment]
model = "sentiment"
watch = "s3://models/sentiment/"
pick = "highest-version"
match = "^v[0-9]+/$"
interval_s = 300
mode = "pull_request"
provider = "github"
repository = "acme/serving"

[automation.tiny]
model = "tiny"
watch = "oci://registry.example.com/acme/tiny"  # or oci://…/acme/tiny:stable: follow one tag
pick = "semver"                                 # the highest release among the repository's tags
match = "^v1[.]"                                # only 1.x (a pre-release only when match reaches past its '-')
mode = "commit"
"""


def render_spec() -> str:
    example = tomllib.loads(EXAMPLE)
    lines = [
        HEADER,
        "# Spec format",
        "",
        "Every `*.toml` file under the spec path (`deployments/` by default, recursively) is part",
        "of one desired state: `[backends.NAME]` tables say what code runs and how, `[endpoints.NAME]`",
        "tables which route reaches which backends, `[secrets.NAME]` tables which age-encrypted",
        "files hold credentials ([secrets](../guides/secrets.md)), `[models.NAME]` tables which weights, pinned by",
        "digest, are staged on a node before its replicas start ([models](../guides/models.md)). "
        "Names are 1-63 lower-case letters, digits, `.`,",
        "`_` or `-`, starting and ending with a letter or digit, and unique across all files.",
        "Unknown keys are errors, types are strict (`\"2\"` is not `2`), and `gitops validate` reports",
        "every error as `FILE:LINE:COL: message`; editors can check files as you type against",
        "`docs/spec.schema.json` (`gitops schema` prints it). A complete example:",
        "",
        "```toml",
        EXAMPLE.rstrip(),
        "```",
        "",
        "Rules that span keys and files, checked as well:",
        "",
        "- an endpoint's `traffic` weights sum to 1 and name backends defined in some file; `shadow`",
        "  names defined backends too, and traffic may not go to a backend that can have zero replicas",
        "  (unless it autoscales from zero and sets `cold_start_timeout_s`);",
        "- every name in a backend's `uses` is a backend or an endpoint; callees are created and updated",
        "  before the backends that use them (backends that use each other, together);",
        "- a `match` rule names a defined backend; `shadow_ignore` needs `shadow_compare = \"json\"`;",
        "- two endpoints never serve the same `grpc_service` ([gRPC](../guides/grpc.md)), except the v2",
        "  service `inference.GRPCInferenceService` at its models' paths (`route = \"/v2/models/NAME\"`,",
        "  any number of them, beside one other endpoint: [v2](../guides/v2.md#grpc));",
        "- `rollout.steps` rise strictly within (0, 1] and end at 1.0; `[update]` may not set both",
        "  `max_surge` and `max_unavailable` to 0;",
        "- `num_replicas` and `[autoscaling]` exclude each other, and `min_replicas <= max_replicas`;",
        "- `protocol = \"v2\"` and a `[v2]` table go together ([v2](../guides/v2.md)): `import_path` then names a",
        "  model class with `predict`, `v2.model` is one of the backend's `models`, and there is no",
        "  `[batching]` or `[multiplex]`;",
        "- `[multiplex]` excludes `[routing]` and `[batching]`; its `max_models_per_replica` is part of",
        "  the backend's version (a change restarts the replicas), its `header`, `models` and",
        "  `model_pattern` change in place;",
        "- `import_path` is `package.module:attribute`, resolved from the repository root at the",
        "  commit (the module is parsed, never imported); `code_paths` are relative paths that exist;",
        "- `route` starts with `/`, is unique, and `/-/` is reserved for the proxy's own paths;",
        "- a backend's replicas restart only when its version changes: the git tree hash of its code",
        "  paths plus the code-affecting keys (or `version` when set); `num_replicas`, `user_config`,",
        "  traffic, health, `[batching]` and `[routing]` settings change in place.",
    ]
    for table, heading, model in TABLES:
        name = next(iter(example[table]))
        lines += _section(heading, model, example[table][name], (table, name))
    automation = tomllib.loads(AUTOMATION_EXAMPLE)
    lines += [
        "",
        "# automation.toml",
        "",
        "`automation.toml`, at the repository root beside `environments/`, is not a spec file: its",
        "`[automation.NAME]` tables watch a moving reference (an S3 prefix and a rule, an hf:// branch, an",
        "OCI tag, or an OCI repository's tags and a rule) and move a `[models.NAME]` pin when it moves, by a",
        "commit or a pull request ([automation](../guides/automation.md)). `gitops validate` checks it",
        "(`FILE:LINE:COL: message`; `pick`, `match` and `kind` only where the reference takes them), and that",
        "each `model` names a `[models.NAME]` of the spec files; one automation per model. An oci:// pin is",
        "the chosen tag's manifest digest in `source` (`oci://REGISTRY/REPO@sha256:…`) and its model's `sha256`.",
        "",
        "<!-- not a spec -->",
        "```toml",
        AUTOMATION_EXAMPLE.rstrip(),
        "```",
    ]
    lines += _section("[automation.NAME]", AutomationSpec, automation["automation"]["sentiment"],
                      ("automation", "sentiment"))
    return "\n".join(lines) + "\n"


def _section(heading: str, model: type[BaseModel], example: dict[str, Any], at: tuple[str, ...]) -> list[str]:
    schema = model.model_json_schema()
    lines = ["", f"## `{heading}`", ""]
    if schema.get("description"):
        lines += [" ".join(schema["description"].split()), ""]
    lines += ["| key | type | default | constraints | description | example |", "| --- | --- | --- | --- | --- | --- |"]
    nested = []
    for name, field in model.model_fields.items():
        key = field.alias or name  # what a file writes
        prop = _resolve(schema["properties"][key], schema)
        sub = _submodel(field.annotation)
        value = _example(prop, example, key, at)
        lines.append(
            "| `{}` | {} | {} | {} | {} | {} |".format(
                key,
                f"table, see [`{heading[:-1]}.{key}]`](#{_anchor(heading[:-1] + '.' + key + ']')})"
                if sub else _type(prop),
                "required" if field.is_required() else f"`{_toml(field.get_default(call_default_factory=True))}`",
                _constraints(prop),
                _cell(field.description or prop.get("description", "")),
                "" if sub else f"`{key} = {_toml(value)}`",
            )
        )
        if sub:
            # An array of tables ([[...match]]) is shown by its first entry (a key
            # the first leaves out, by the first entry that has it).
            first = {k: v for entry in reversed(value) for k, v in entry.items()} if isinstance(value, list) else value
            nested.append((f"{heading[:-1]}.{key}]", sub, first, (*at, key)))
    for sub_heading, sub, value, where in nested:
        lines += _section(sub_heading, sub, value, where)
    return lines


def _example(prop: dict[str, Any], example: dict[str, Any], key: str, at: tuple[str, ...]) -> Any:
    if prop.get("examples"):
        return prop["examples"][0]
    for source in (example, *_siblings(at)):
        if key in source:
            return source[key]
    raise KeyError(f"docgen.spec.EXAMPLE has no example of {'.'.join((*at, key))}")


def _siblings(at: tuple[str, ...]) -> list[dict[str, Any]]:
    """Other entries of the same table in EXAMPLE (a key one backend cannot show, another does)."""
    document = tomllib.loads(EXAMPLE)
    table = document.get(at[0], {})
    found = []
    for entry in table.values():
        for part in at[2:]:
            entry = entry.get(part, {})
        found.append(entry)
    return found


def _submodel(annotation: Any) -> type[BaseModel] | None:
    candidates = [annotation, *typing.get_args(annotation)]
    return next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)


def _resolve(prop: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """The property without `null` alternatives and `$ref`s (a model field's own keys win)."""
    options = [p for p in prop.get("anyOf", [prop]) if p.get("type") != "null"]
    resolved: dict[str, Any] = dict(options[0]) if len(options) == 1 else {"anyOf": options}
    if "$ref" in resolved:
        resolved = {**schema["$defs"][resolved.pop("$ref").rsplit("/", 1)[1]], **resolved}
    for key in ("description", "examples"):
        if key in prop:
            resolved[key] = prop[key]
    return resolved


def _type(prop: dict[str, Any]) -> str:
    if "anyOf" in prop:
        return " or ".join(_type(option) for option in prop["anyOf"])
    kind = prop.get("type")
    if kind == "array":
        items = prop.get("items", {})
        return f"array of {_type(items)}s" if items else "array"
    if kind == "object":
        values = prop.get("additionalProperties")
        return f"table of {_type(values)}s" if isinstance(values, dict) and values else "table"
    return {"integer": "integer", "number": "number", "string": "string", "boolean": "boolean"}.get(str(kind), "any")


_BOUNDS = (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<"))


def _constraints(prop: dict[str, Any]) -> str:
    found = [f"{op} {_number(prop[key])}" for key, op in _BOUNDS if key in prop]
    for key, text in (("minItems", "at least {} items"), ("maxItems", "at most {} items"),
                      ("minLength", "at least {} characters"), ("maxLength", "at most {} characters"),
                      ("pattern", "matches `{}`")):
        if key in prop:
            found.append(text.format(prop[key]))
    if "enum" in prop:
        found.append("one of " + ", ".join(f"`{value}`" for value in prop["enum"]))
    for key, what in (("items", "each item"), ("additionalProperties", "each value")):
        inner = prop.get(key)
        if isinstance(inner, dict) and _constraints(inner):
            found.append(f"{what} {_constraints(inner)}")
    return ", ".join(found)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _toml(value: Any) -> str:
    """A value written as TOML (an inline table for a mapping)."""
    if value is None:
        return "unset"
    if isinstance(value, BaseModel):
        return _toml(value.model_dump(exclude_none=True))
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return _number(value) if isinstance(value, float) and value.is_integer() and abs(value) < 1e15 else str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_toml(v)}" for k, v in value.items()) + " }" if value else "{}"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def _key(key: str) -> str:
    return key if key and all(c.isalnum() or c in "-_" for c in key) else json.dumps(key)


def _anchor(heading: str) -> str:
    return "".join(c for c in heading.lower().replace(" ", "-") if c.isalnum() or c in "-_")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")
