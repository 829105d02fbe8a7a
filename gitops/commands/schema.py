"""`gitops schema`: the JSON Schema of a spec file, for editors and CI.

Generated from the pydantic models the loader validates with
(`gitops.specs.models`), so it cannot drift from what `gitops validate`
accepts: a spec file is a table with `backends` and `endpoints`, each a
table of `NAME_PATTERN`-named tables. Written in JSON Schema draft 4
(`definitions`, boolean `exclusiveMinimum`), the newest draft Taplo / Even
Better TOML read. The schema checks shapes, types, ranges and unknown keys;
rules across keys and files (traffic sums, references, import paths) stay
with `gitops validate`. `docs/spec.schema.json` is this output, committed.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pydantic.json_schema import models_json_schema

from gitops.specs.models import NAME_PATTERN, BackendSpec, EndpointSpec, ModelSpec, SecretSpec

__all__ = ["schema_command", "spec_file_schema", "render_schema"]

_DRAFT_4 = "http://json-schema.org/draft-04/schema#"
_BOUNDS = {"exclusiveMinimum": "minimum", "exclusiveMaximum": "maximum"}


def schema_command(args: argparse.Namespace) -> int:
    sys.stdout.write(render_schema())
    return 0


def render_schema() -> str:
    return json.dumps(spec_file_schema(), indent=2, sort_keys=True) + "\n"


def spec_file_schema() -> dict[str, Any]:
    (backend, endpoint, secret, model), document = _models(BackendSpec, EndpointSpec, SecretSpec, ModelSpec)
    name = f"^(?:{NAME_PATTERN.pattern})$"
    definitions = _draft_4(document.get("$defs", {}))
    # A backend runs import_path's code or the built-in OpenAI app of its [llm] table: one is required.
    definitions["BackendSpec"]["anyOf"] = [{"required": ["import_path"]}, {"required": ["llm"]}]
    return {
        "$schema": _DRAFT_4,
        "title": "ray-gitops spec file",
        "description": "One TOML file under the spec path: [backends.NAME], [endpoints.NAME], [secrets.NAME] and "
        "[models.NAME] tables. "
        "`gitops validate` also checks the rules across keys and files.",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "backends": _named_tables(name, backend, "A backend: user code run as Ray actors (replicas)."),
            "endpoints": _named_tables(name, endpoint, "An endpoint: an HTTP route and its traffic split."),
            "secrets": _named_tables(name, secret, "A secret: an age-encrypted file delivered to backends' replicas."),
            "models": _named_tables(
                name, model, "A model: weights pinned by digest, staged on a node before its replicas start."
            ),
        },
        "definitions": definitions,
    }


def _models(*models: type) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    mapping, document = models_json_schema(
        [(model, "validation") for model in models], ref_template="#/definitions/{model}"
    )
    return [mapping[(model, "validation")] for model in models], document


def _named_tables(name_pattern: str, ref: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "description": description,
        "type": "object",
        "patternProperties": {name_pattern: ref},
        "additionalProperties": False,
    }


def _draft_4(value: Any) -> Any:
    """Pydantic writes draft 2020-12; draft 4 spells exclusive bounds as booleans
    and ignores the keys beside a `$ref`.

    TOML has no null: an optional key is one that is left out, so the
    `null` branch of an optional field and `null` defaults go (editors
    then complete the real type).
    """
    if isinstance(value, list):
        return [_draft_4(item) for item in value]
    if not isinstance(value, dict):
        return value
    converted = {key: _draft_4(item) for key, item in value.items() if not (key == "default" and item is None)}
    if isinstance(converted.get("default"), dict):
        converted["default"] = {key: item for key, item in converted["default"].items() if item is not None}
    converted = _without_null(converted)
    if "$ref" in converted and len(converted) > 1:
        # Draft 4 ignores a $ref's sibling keys; under allOf the description still shows in editors.
        converted = {"allOf": [{"$ref": converted.pop("$ref")}], **converted}
    for exclusive, inclusive in _BOUNDS.items():
        if isinstance(converted.get(exclusive), (int, float)) and not isinstance(converted[exclusive], bool):
            converted[inclusive] = converted.pop(exclusive)
            converted[exclusive] = True
    return converted


def _without_null(schema: dict[str, Any]) -> dict[str, Any]:
    branches = schema.get("anyOf")
    if not isinstance(branches, list) or {"type": "null"} not in branches:
        return schema
    kept = [branch for branch in branches if branch != {"type": "null"}]
    rest = {key: item for key, item in schema.items() if key != "anyOf"}
    return {**rest, **kept[0]} if len(kept) == 1 else {**rest, "anyOf": kept}
