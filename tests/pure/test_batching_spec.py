"""`[backends.NAME.batching]` in a spec: its keys, defaults and ranges."""

from __future__ import annotations

from gitops.specs.models import check_backend

AT = ("backends", "model")


def test_a_batching_table_is_read_with_its_settings() -> None:
    spec, problems = check_backend(
        {"import_path": "m:Model", "batching": {"max_batch_size": 16, "batch_wait_timeout_s": 0.05}}, AT
    )
    assert problems == () and spec is not None
    assert (spec.batching.max_batch_size, spec.batching.batch_wait_timeout_s) == (16, 0.05)


def test_an_empty_batching_table_takes_the_defaults() -> None:
    spec, _ = check_backend({"import_path": "m:Model", "batching": {}}, AT)
    assert spec is not None and (spec.batching.max_batch_size, spec.batching.batch_wait_timeout_s) == (8, 0.01)


def test_a_batch_size_below_one_is_an_error_at_its_key() -> None:
    _, problems = check_backend({"import_path": "m:Model", "batching": {"max_batch_size": 0}}, AT)
    assert [(p.loc, p.message) for p in problems] == [
        ((*AT, "batching", "max_batch_size"), "backends.model.batching.max_batch_size: must be >= 1 (got 0)")
    ]


def test_an_unknown_batching_key_is_an_error() -> None:
    _, problems = check_backend({"import_path": "m:Model", "batching": {"max_size": 4}}, AT)
    assert [p.message for p in problems] == ["backends.model.batching: unknown key 'max_size' (did you mean 'max_batch_size'?)"]
