"""Models in the spec, offline: tables checked with locations (scheme, digest
shape, names backends use), a model's digest in its backends' versions, and
how a plan shows a new digest and the backends it restarts."""

from __future__ import annotations

import hashlib

import pytest

from gitops.reconcile.planner import plan
from gitops.reconcile.plans import ActionKind
from gitops.specs.documents import combine, parse_file
from gitops.specs.pins.pinned_models import bind_models, models_version
from vocabulary.replicas.model_digests import (
    digest_problem,
    is_directory,
    manifest_digest,
    manifest_text,
    parse_manifest,
    source_problem,
)
from vocabulary.spec.backends import BackendConfig, ModelConfig
from vocabulary.spec.state import ServingState

A, B = "9f86d081" + "0" * 56, "1b4e28ba" + "1" * 56


def _errors(data: bytes) -> list[str]:
    documents = combine({"deployments/m.toml": parse_file("deployments/m.toml", data)})
    return sorted(str(error) for error in documents.errors)


def test_a_valid_table_and_the_backends_naming_it_pass() -> None:
    spec = f'''[models.sentiment]
source = "s3://models/sentiment/2026-11-20/"
sha256 = "{A}"
load_timeout_s = 60

[backends.s]
import_path = "apps.s:S"
models = ["sentiment"]
'''.encode()
    assert _errors(spec) == []


def test_bad_sources_digests_and_undeclared_names_are_located() -> None:
    spec = b'''[models.a]
source = "ftp://host/file"
sha256 = "9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08"

[models.b]
source = "http://models.example.com/b.bin"
sha256 = "sha256:abc"
load_timeout_s = 0

[backends.s]
import_path = "apps.s:S"
models = ["a", "c", "a"]
'''
    # A wrong value is located at the value, not at its key's column 1.
    assert _errors(spec) == [
        "deployments/m.toml:12:16: backends.s.models[1]: no [models.c] is declared (declared: a, b)",
        "deployments/m.toml:12:1: backends.s.models: names 'a' twice",
        "deployments/m.toml:2:10: models.a.source: must be an s3://, https://, hf://, oci:// or file:/// URL (got scheme 'ftp')",
        "deployments/m.toml:3:10: models.a.sha256: must be lower-case hex (got '9F86D081884C7D659A2FEAA0C55AD015A3BF...)",
        ("deployments/m.toml:6:10: models.b.source: http:// is allowed only on a loopback host (127.0.0.1, ::1, "
        "localhost); use https://"),
        ("deployments/m.toml:7:10: models.b.sha256: must be the 64 hex digits alone, without 'sha256:' (got "
        "'sha256:abc')"),
        "deployments/m.toml:8:18: models.b.load_timeout_s: must be > 0 (got 0)",
    ]


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ("s3://bucket/key.bin", None),
        ("s3://bucket/prefix/", None),
        ("https://host/m.bin", None),
        ("http://127.0.0.1:8080/m.bin", None),
        ("http://[::1]/m.bin", None),
        ("file:///data/m/", None),
        ("s3://bucket", "s3:// needs a key or a prefix ending in '/' after the bucket"),
        ("s3://key:secret@bucket/k", "must not hold credentials; S3 takes them from the node's AWS_* variables"),
        ("file://relative/m.bin", "file:// needs an absolute path (file:///data/models/…)"),
        ("https://host/dir/", "https:// names a single file (a directory can come from s3:// or file:///)"),
        ("https://host/m.bin?sig=1", "must have no query or fragment"),
        ("models/m.bin", "must be an s3://, https://, hf://, oci:// or file:/// URL (got scheme 'none')"),
    ],
)
def test_sources(source: str, why: str | None) -> None:
    assert source_problem(source) == why


def test_digest_shape_and_directory_manifest() -> None:
    assert digest_problem(A) is None
    assert digest_problem("abc") is not None
    entries = [("b/w.bin", 3, B), ("a.json", 2, A)]
    text = manifest_text(entries)
    assert text == f"a.json\t2\t{A}\nb/w.bin\t3\t{B}\n".encode()
    assert manifest_digest(entries) == hashlib.sha256(text).hexdigest()
    assert parse_manifest(text) == sorted(entries)
    assert is_directory("s3://b/p/") and not is_directory("s3://b/p")
    with pytest.raises(ValueError):
        manifest_text([("../x", 1, A)])


def _backend(name: str, models: tuple[str, ...], version: str = "abc") -> BackendConfig:
    return BackendConfig(name=name, version=version, import_path="apps.s:S", models=models)


def test_a_new_digest_shows_in_the_plan_and_restarts_exactly_the_backends_using_it() -> None:
    old_models = {"sentiment": ModelConfig(name="sentiment", source="s3://m/s/", sha256=A)}
    new_models = {"sentiment": ModelConfig(name="sentiment", source="s3://m/s/", sha256=B)}

    def state(models: dict[str, ModelConfig]) -> ServingState:
        backends = [_backend("uses", ("sentiment",)), _backend("other", ())]
        return ServingState(backends={b.name: bind_models(b, models) for b in backends}, models=models)

    old, new = state(old_models), state(new_models)
    assert old.backends["uses"].version == models_version("abc", old_models) != "abc"
    assert old.backends["other"].version == "abc"
    result = plan(new, old)
    assert [(a.kind, a.name, a.restarts) for a in result.actions] == [(ActionKind.UPDATE_BACKEND, "uses", True)]
    lines = [change.render() for change in result.actions[0].changes]
    assert "~ model sentiment sha256 9f86… → 1b4e…" in lines
    assert plan(old, old).actions == ()


def test_a_new_source_with_the_same_digest_restarts_nothing() -> None:
    old_models = {"s": ModelConfig(name="s", source="s3://m/a/", sha256=A)}
    new_models = {"s": ModelConfig(name="s", source="https://h/a.bin", sha256=A)}
    old = bind_models(_backend("b", ("s",)), old_models)
    new = bind_models(_backend("b", ("s",)), new_models)
    assert old.version == new.version
    result = plan(ServingState(backends={"b": new}), ServingState(backends={"b": old}))
    assert [a.restarts for a in result.actions] == [False]
    assert [c.render() for c in result.actions[0].changes] == ['model s source: "s3://m/a/" → "https://h/a.bin"']


def test_a_new_backend_with_a_model_shows_its_digest() -> None:
    models = {"s": ModelConfig(name="s", source="s3://m/a/", sha256=A)}
    result = plan(ServingState(backends={"b": bind_models(_backend("b", ("s",)), models)}), ServingState())
    assert "model s sha256 9f86…" in result.actions[0].details()


def test_cache_stats_count_fetches_per_model_and_hits() -> None:
    from vocabulary.replicas.model_stats import ModelCacheStats

    stats = ModelCacheStats.from_json("")
    stats.staged("a", 100, 1.5, cache_bytes=100)
    stats.staged("a", 0, 0.1, cache_bytes=100)
    stats.staged("b", 50, 0.5, cache_bytes=150)
    again = ModelCacheStats.from_json(stats.to_json())
    assert again == stats
    assert (again.fetch_bytes, again.fetches, again.hits, again.cache_bytes) == ({"a": 100, "b": 50}, {"a": 1, "b": 1}, 1, 150)
    assert ModelCacheStats.from_json("{not json") == ModelCacheStats()
