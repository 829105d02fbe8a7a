"""A `json:` key read without parsing the whole body gives what a whole parse gives, on hostile bodies too."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vocabulary.request_path.request_keys import KeyReader, json_bytes, json_field, json_key
from vocabulary.spec.keys import KeyKind


def whole_parse(body: bytes, field: str, limit: int | None = None) -> bytes | None:
    """The reference: parse the body, serialise the field (what the proxy did before)."""
    found = json_bytes(json_field(body, field), limit)
    return found if found is None or limit is None else found[:limit]


CHAT = json.dumps({"model": "sim", "messages": [{"role": "system", "content": "w " * 600},
                                                 {"role": "user", "content": "hi é \"quoted\" \n"}],
                   "stream": True}).encode()


@pytest.mark.parametrize(("body", "field", "limit"), [
    (CHAT, "messages", 1024), (CHAT, "messages", None), (CHAT, "messages", 10), (CHAT, "model", None),
    (CHAT, "stream", None), (CHAT, "absent", None),
    # nested objects: a nested field of the same name is not the top-level one
    (b'{"a": {"model": "inner", "x": [{"model": 1}]}, "model": "outer"}', "model", None),
    (b'{"a": {"model": "inner"}}', "model", None),
    (b'{"a": [1, {"b": [[], {}]}], "model": {"deep": [1, 2, {"x": null}]}}', "model", None),
    # escapes: in values, and a key spelled with escapes
    (b'{"note": "say \\"model\\": x", "model": "a\\u00e9\\n\\t\\"b"}', "model", None),
    (b'{"m\\u006fdel": "escaped", "x": 1}', "model", None),
    (b'{"model": "first", "m\\u006Fdel": "escaped, last"}', "model", None),
    (b'{"model": "first", "x": "\\u0041\\u00e9"}', "model", None),
    # duplicate keys: the last wins, as in a whole parse
    (b'{"model": "first", "model": "second"}', "model", None),
    (b'{"messages": [1], "x": {"messages": 2}, "messages": [3]}', "messages", 1024),
    (b'{"model": "first", "v": "\\"model\\""}', "model", None),
    # whitespace everywhere
    (b' \n{ "model" :\t"sim" , "k" : [ 1 , 2 ] } \r\n', "model", None),
    (b'{"messages":[ {"a" : 1} ,{ "b":2 } ]}', "messages", 5),
    (b'{"messages": []}', "messages", 64), (b'{"messages": "text"}', "messages", 2),
    # not JSON, not an object, broken before the field, empty: no key
    (b"", "model", None), (b"not json", "model", None), (b'["model", "sim"]', "model", None),
    (b'"model"', "model", None), (b"{", "model", None), (b'{"a": tru, "model": "sim"}', "model", None),
    (b'{"a" 1, "model": "sim"}', "model", None), (b'{"model" "sim"}', "model", None),
    (b"\xff\xfe{}", "model", None), (b'{"a": "\xff", "model": "sim"}', "model", None),
    (b"\xef\xbb\xbf{\"model\": \"bom\"}", "model", None),
    (b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b', "model": "deep"}', "model", None),
    # odd fields take the whole parse
    (b'{"\\u00e9": 1, "\xc3\xa9": 2}', "é", None), (b'{"a/b": 1}', "a/b", None), (b'{"": 1}', "", None),
])
def test_a_json_key_is_what_a_whole_parse_reads(body: bytes, field: str, limit: int | None) -> None:
    assert json_key(body, field, limit) == whole_parse(body, field, limit)


def test_a_body_broken_after_the_field_is_still_routed_by_the_field() -> None:
    """Documented: the body is read only as far as the field (the replica answers its error)."""
    assert json_key(b'{"model": "sim", "messages": [', "model") == b"sim"
    assert whole_parse(b'{"model": "sim", "messages": [', "model") is None


def test_a_long_conversation_is_read_only_as_far_as_its_prefix() -> None:
    """Elements past the prefix are not even parsed: a broken tail does not change the key."""
    head = b'{"messages": [{"role": "system", "content": "' + b"w" * 2000 + b'"}, '
    assert json_key(head + b'{"broken', "messages", 1024) == whole_parse(head + b'{"x": 1}]}', "messages", 1024)


_json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
_json_values = st.recursive(_json_scalars, lambda inner: st.lists(inner, max_size=4)
                            | st.dictionaries(st.sampled_from(["model", "messages", "m", "x"]), inner, max_size=4),
                            max_leaves=12)
_members = st.lists(st.tuples(st.sampled_from(["model", "messages", "m\\u006fdel", "x", "\\\"model"]), _json_values),
                    max_size=5)


def _object(members: list[tuple[str, Any]], ascii_only: bool, spaced: bool) -> bytes:
    """An object written member by member, so keys may repeat or be spelled with escapes."""
    sep = ", " if spaced else ","
    return ("{" + sep.join(f'"{key}":{json.dumps(value, ensure_ascii=ascii_only)}' for key, value in members)
            + "}").encode()


@settings(max_examples=200, deadline=None)
@given(_members, st.booleans(), st.booleans(), st.sampled_from(["model", "messages"]),
       st.sampled_from([None, 1, 8, 64]))
def test_any_object_reads_as_a_whole_parse_reads_it(
    members: list[tuple[str, Any]], ascii_only: bool, spaced: bool, field: str, limit: int | None,
) -> None:
    body = _object(members, ascii_only, spaced)
    assert json_key(body, field, limit) == whole_parse(body, field, limit)


@pytest.mark.parametrize(("args", "limit", "expected"), [
    (({"user": "ada", "x": 1},), None, b"ada"),
    (({"messages": [{"content": "hi"}]},), 8, b'[{"conte'),
    ((b'{"user": "ada"}',), None, b"ada"),
    (('{"user": {"id": 7}}',), None, b'{"id":7}'),
    (({"other": 1},), None, None),
    ((["user", "ada"],), None, None),
    ((42,), None, None),
    ((), None, None),
])
def test_a_handle_call_s_key_is_a_json_field_of_its_first_argument(
    args: tuple[object, ...], limit: int | None, expected: bytes | None,
) -> None:
    field = "messages" if limit else "user"
    assert KeyReader(KeyKind.JSON, field, limit).read_call(args) == expected


def test_a_handle_call_carries_no_header_cookie_or_query_key() -> None:
    for kind in (KeyKind.HEADER, KeyKind.COOKIE, KeyKind.QUERY):
        assert KeyReader(kind, "user").read_call(({"user": "ada"},)) is None
