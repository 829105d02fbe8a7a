"""`gitops schema`: the spec format as JSON Schema, from the loader's own models.

The committed docs/spec.schema.json must be today's output (regenerate with
`gitops schema > docs/spec.schema.json`); every example in deployments/
passes it; the spec corpus's type, range, name and unknown-key errors fail it.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import jsonschema
import pytest

from gitops.commands.schema import render_schema, spec_file_schema

PROJECT = Path(__file__).resolve().parents[2]
CORPUS = PROJECT / "tests" / "spec_corpus"
EXAMPLES = sorted((PROJECT / "deployments").glob("**/*.toml"))
# Errors a schema can express: a value's type, its range, a name's shape, a
# key that is unknown or missing. Rules across keys and files are validate's.
SCHEMA_ERROR = re.compile(
    r"must be (an integer|a number|a string|a table|an array|[<>]=? -?\d)|unknown key|unknown table"
    r"|missing required key|name must match"
)
TYPE_CASES = sorted(
    case.name for case in CORPUS.iterdir()
    if (case / "expected.txt").exists() and SCHEMA_ERROR.search((case / "expected.txt").read_text())
)


def validator() -> jsonschema.Draft4Validator:
    return jsonschema.Draft4Validator(spec_file_schema())


def test_the_committed_schema_is_what_gitops_schema_prints() -> None:
    committed = (PROJECT / "docs" / "spec.schema.json").read_text()
    assert committed == render_schema(), "docs/spec.schema.json is stale: run `gitops schema > docs/spec.schema.json`"


def test_the_schema_is_valid_draft_4_for_toml_editors() -> None:
    jsonschema.Draft4Validator.check_schema(json.loads(render_schema()))


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_every_example_spec_passes_the_schema(example: Path) -> None:
    errors = [error.message for error in validator().iter_errors(tomllib.loads(example.read_text()))]
    assert errors == []


def test_the_corpus_has_type_errors_to_check() -> None:
    assert {"bool-for-number", "string-for-integer", "unknown-backend-key", "missing-route"} <= set(TYPE_CASES)


@pytest.mark.parametrize("case", TYPE_CASES)
def test_the_schema_rejects_the_corpus_type_errors(case: str) -> None:
    documents = [tomllib.loads(path.read_text()) for path in sorted((CORPUS / case).glob("deployments/**/*.toml"))
                 if _parses(path)]
    assert any(list(validator().iter_errors(document)) for document in documents)


def _parses(path: Path) -> bool:
    try:
        tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        return False
    return True
