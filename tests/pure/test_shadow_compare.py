"""Shadow comparison: status, JSON without ignored keys, exact bytes; a bounded sample of mismatches."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.observability.shadow_compare import DIFF_LIMIT, Comparison, Mismatch, MismatchLog, compare
from vocabulary.spec.endpoints import ShadowCompare


def reply(body: Any, status: int = 200) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return status, [], data


@pytest.mark.parametrize("mode", list(ShadowCompare)[1:])
def test_a_different_status_is_a_mismatch_in_every_mode(mode: ShadowCompare) -> None:
    assert compare(mode, frozenset(), reply({}), reply({}, 500)) == Comparison(False, "status 200 != 500")


def test_status_mode_ignores_the_bodies() -> None:
    assert compare(ShadowCompare.STATUS, frozenset(), reply({"a": 1}), reply({"a": 2})).matched


@pytest.mark.parametrize(
    ("primary", "shadow", "diff"),
    [
        ({"a": 1, "b": [1, 2]}, {"b": [1, 2], "a": 1}, ""),  # key order does not matter
        ({"a": 1}, {"a": 1.0}, ""),  # one number type
        ({"a": 1}, {"a": 2}, "$.a: 1 != 2"),
        ({"a": {"b": [1, {"c": "x"}]}}, {"a": {"b": [1, {"c": "y"}]}}, '$.a.b[1].c: "x" != "y"'),
        ({"a": [1, 2]}, {"a": [1]}, "$.a: 2 items != 1 items"),
        ({"a": 1}, {}, "$.a: 1 != (missing)"),
        ({"a": True}, {"a": 1}, "$.a: true != 1"),
    ],
)
def test_json_mode_compares_values_and_names_the_first_difference(primary: Any, shadow: Any, diff: str) -> None:
    # With the endpoint's `shadow_values`: the values are shown.
    assert compare(ShadowCompare.JSON, frozenset(), reply(primary), reply(shadow), values=True) == Comparison(
        not diff, diff)


@pytest.mark.parametrize(
    ("primary", "shadow", "diff"),
    [
        ({"email": "a@x.example"}, {"email": "b@x.example"}, "$.email: string values differ"),
        ({"a": {"iban": ["DE89 3704"]}}, {"a": {"iban": ["DE02 1203"]}}, "$.a.iban[0]: string values differ"),
        ({"a": 1}, {"a": 2}, "$.a: number values differ"),
        ({"a": 1}, {}, "$.a: number != (missing)"),
        ({"a": True}, {"a": 1}, "$.a: boolean != number"),
        ({"a": None}, {"a": {"k": "v"}}, "$.a: null != object"),
        ({"a": [1, 2]}, {"a": [1]}, "$.a: 2 items != 1 items"),
    ],
)
def test_by_default_a_json_diff_names_the_path_and_types_never_the_values(primary: Any, shadow: Any, diff: str) -> None:
    found = compare(ShadowCompare.JSON, frozenset(), reply(primary), reply(shadow))
    assert found == Comparison(False, diff)
    assert "x.example" not in found.diff and "DE" not in found.diff


def test_json_mode_leaves_ignored_keys_out_at_any_depth() -> None:
    primary = {"timestamp": 1, "items": [{"id": 1, "timestamp": 5}]}
    shadow = {"timestamp": 2, "items": [{"id": 1, "timestamp": 9}]}
    assert compare(ShadowCompare.JSON, frozenset({"timestamp"}), reply(primary), reply(shadow)).matched


def test_json_mode_falls_back_to_bytes_for_bodies_that_are_not_json() -> None:
    assert compare(ShadowCompare.JSON, frozenset(), reply(b"ok"), reply(b"ok")).matched
    assert not compare(ShadowCompare.JSON, frozenset(), reply(b"ok"), reply(b"{}")).matched


def test_a_json_diff_is_short() -> None:
    found = compare(ShadowCompare.JSON, frozenset(), reply({"a": "x" * 1000}), reply({"a": "y" * 1000}))
    assert not found.matched and len(found.diff) <= DIFF_LIMIT


def test_exact_mode_compares_bytes_and_names_the_first_differing_byte() -> None:
    assert compare(ShadowCompare.EXACT, frozenset(), reply(b"abc"), reply(b"abc")).matched
    assert compare(ShadowCompare.EXACT, frozenset(), reply(b"abc"), reply(b"abd")).diff == (
        "bodies differ from byte 2 (3 vs 3 bytes)"
    )
    assert compare(ShadowCompare.EXACT, frozenset(), reply(b"ab"), reply(b"abc")).diff == (
        "bodies differ from byte 2 (2 vs 3 bytes)"
    )


def mismatch(n: int) -> Mismatch:
    return Mismatch(at=float(n), endpoint="e", backend="v2", path=f"/e/{n}", primary_status=200,
                    shadow_status=500, diff="status 200 != 500")


def test_the_mismatch_log_keeps_the_newest_first_and_drops_the_oldest() -> None:
    log = MismatchLog(size=3)
    for n in range(5):
        log.record(mismatch(n))
    assert [m.path for m in log.recent()] == ["/e/4", "/e/3", "/e/2"]
    assert log.recent()[0].to_json()["shadow_status"] == 500
