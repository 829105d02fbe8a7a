"""Fuzzing the loader: whatever the files hold, it returns a LoadResult and never raises."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gitops.sources.trees import MemoryTree
from gitops.specs.loading import Loader, LoadResult

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
APP = "class Echo:\n    def __call__(self, request):\n        return 1\n\ndef hello(request):\n    return 1\n"

KEYS = st.sampled_from(
    [
        "import_path", "init_args", "init_kwargs", "num_replicas", "max_concurrent_queries",
        "user_config", "ray_actor_options", "runtime_env", "code_paths", "version", "autoscaling",
        "min_replicas", "max_replicas", "route", "methods", "traffic", "shadow", "timeout_s",
        "num_cpus", "echo", "echo-v1", "Bad Name", "", "apps",
    ]
)
SCALARS = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.sampled_from(["apps.echo:Echo", "apps.echo:hello", "apps.gone:x", "/echo", "GET", "apps", "../x"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)
DOCUMENTS = st.fixed_dictionaries(
    {},
    optional={
        "backends": st.dictionaries(KEYS, VALUES, max_size=3) | VALUES,
        "endpoints": st.dictionaries(KEYS, VALUES, max_size=3) | VALUES,
        "other": VALUES,
    },
)


def toml_value(value: Any) -> str:
    """A TOML inline value; JSON string escapes are TOML basic-string escapes."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)} = {toml_value(v)}" for k, v in value.items()) + "}"


def toml_document(document: dict[str, Any]) -> str:
    return "".join(f"{key} = {toml_value(value)}\n" for key, value in document.items())


def load(files: dict[str, str | bytes]) -> LoadResult:
    result = Loader().load_tree(MemoryTree({"apps/echo.py": APP, **files}))
    assert isinstance(result, LoadResult)
    assert (result.state is None) == bool(result.errors)
    return result


@FUZZ
@given(st.text(max_size=300))
def test_random_text_never_raises(text: str) -> None:
    load({"deployments/fuzz.toml": text})


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes_never_raise(data: bytes) -> None:
    load({"deployments/fuzz.toml": data})


@FUZZ
@given(st.lists(DOCUMENTS, min_size=1, max_size=3))
def test_random_nested_values_never_raise(documents: list[dict[str, Any]]) -> None:
    result = load({f"deployments/f{i}.toml": toml_document(doc) for i, doc in enumerate(documents)})
    for error in result.errors:
        assert error.file.startswith("deployments/f") and error.line >= 1 and error.col >= 1


@FUZZ
@given(st.text(alphabet="[]{}=\"'.,#\n abc123-_:/", max_size=200))
def test_toml_punctuation_soup_never_raises(text: str) -> None:
    load({"deployments/fuzz.toml": text})


@FUZZ
@given(st.text(max_size=200))
def test_random_user_code_never_raises(source: str) -> None:
    spec = '[backends.b]\nimport_path = "apps.fuzz:handler"\n[endpoints.e]\nroute = "/"\ntraffic = { b = 1.0 }\n'
    load({"deployments/a.toml": spec, "apps/fuzz.py": source})


@pytest.mark.parametrize("depth", [20, 40, 500, 3000])
@pytest.mark.parametrize("opener", ["[", "{a = "])
def test_deeply_nested_values_are_an_error_not_a_crash(depth: int, opener: str) -> None:
    closer = "]" if opener == "[" else "}"
    value = opener * depth + ("" if opener == "[" else "1") + closer * depth
    spec = f'[backends.b]\nimport_path = "apps.echo:Echo"\nuser_config = {value}\n'
    result = load({"deployments/a.toml": spec})
    assert result.ok is (depth == 20)
