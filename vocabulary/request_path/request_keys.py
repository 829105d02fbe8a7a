"""Reading a routing key out of a request (a header, a cookie, a query parameter or a JSON field) or a handle call.

`KeyReader` reads where `[backends.X.routing] key` says; `json_field` reads a
top-level field of a JSON body for both a routing key and an endpoint's
`match = [{ json = FIELD, ... }]` rule. The body is the one the proxy has
already read under its body limit, so nothing here reads more. A body that
is not a JSON object, or lacks the field, gives None (the request is then
routed by the default policy or the weights), never an error.

A JSON value becomes bytes as compact JSON (a string: its UTF-8 text), so
`prefix_bytes` counts bytes of that serialisation. Pure: no I/O.

`json_key` reads a field without parsing the whole body: it walks the
top-level object member by member (the C scanner decodes each key and each
value before the field), decodes the field's value, and for a list read to
a byte limit (`prefix_affinity`'s `prefix_bytes`) only its first elements.
When the walk would decode nearly everything anyway, one whole parse is
cheaper: the field's name first appears in the last quarter of the body, or
not at all, or a whole object or list must be decoded on the way (without a
limit, e.g. for `consistent_hash` or a `match` rule, a field after the
conversation, or an object-valued field).
The whole body is parsed instead (`json_field`) whenever the answer might
differ from a full parse's: Python's json keeps the LAST of duplicate keys,
so the field's quoted name must occur once in the body and no `\\u` escape
may spell one of its letters (a field name outside `[A-Za-z0-9_.-]` always
takes the full parse). A body that is a JSON object up to the field but
malformed after it is routed by the field (the replica answers its error);
one malformed before the field gives None, as a full parse would.
"""

from __future__ import annotations

import json
import re
from _json import scanstring  # the C string scanner json.decoder uses (typeshed names it here)
from dataclasses import dataclass
from typing import Sequence
from urllib.parse import parse_qsl

from vocabulary.spec.keys import KeyKind
from vocabulary.spec.routing import RoutingConfig, RoutingPolicy
from vocabulary.request_path.wire import WireRequest

__all__ = ["KeyReader", "json_key", "json_field", "json_bytes", "cookie_value"]

_MISSING = object()


def json_field(body: bytes, field: str) -> object:
    """Field `field` of a JSON-object body; `_MISSING` (never raised) when the
    body is not a JSON object or has no such field."""
    if not body:
        return _MISSING
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return _MISSING
    if not isinstance(document, dict):
        return _MISSING
    return document.get(field, _MISSING)


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)  # one, not one per call
_compact = _ENCODER.encode


def json_bytes(value: object, limit: int | None = None) -> bytes | None:
    """A JSON value as the bytes a key hashes (a string: its text, else compact
    JSON); None for a missing field. With `limit`, at least its first `limit`
    bytes: a long array (a conversation's messages) is serialised only as far
    as needed."""
    if value is _MISSING:
        return None
    if isinstance(value, str):
        text = value
    elif isinstance(value, list) and limit is not None:
        # Longer and longer heads of the list (4, 8, 16... items) until one is
        # long enough: at most twice the work of the bytes needed.
        count = 4
        text = _compact(value[:count])
        while len(text) <= limit and count < len(value):
            count *= 2
            text = _compact(value[:count])
        if count < len(value):
            text = text[:-1]  # a head's closing bracket is not the value's
    else:
        text = _compact(value)
    return text.encode("utf-8", "surrogatepass")


_DECODER = json.JSONDecoder()
_WHITESPACE = re.compile(r"[ \t\n\r]*")  # JSON's, as json.decoder's
_PLAIN_FIELD = re.compile(r"[A-Za-z0-9_.\-]+")
_UNICODE_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})")
_UNSURE = object()  # the fast walk cannot tell: parse the whole body


def json_key(body: bytes, field: str, limit: int | None = None) -> bytes | None:
    """`json_bytes(json_field(body, field), limit)`, cut to `limit` bytes, reading
    the body only as far as the field (see the module docstring)."""
    found = _walk_to(body, field, limit)
    if found is _UNSURE:
        found = json_bytes(json_field(body, field), limit)
    if found is None or limit is None:
        return found  # type: ignore[return-value]  # _walk_to gives bytes, None or _UNSURE, handled above
    return found[:limit]  # type: ignore[index]  # bytes, as above


def _walk_to(body: bytes, field: str, limit: int | None) -> object:
    """The field's bytes, None (no such field, or not a JSON object), or `_UNSURE`."""
    start = _ws(body, 0)
    if body[start:start + 1] != b"{" or not _PLAIN_FIELD.fullmatch(field):
        return _UNSURE  # not an object here (a full parse says None), or a field escapes could spell oddly
    quoted = b'"' + field.encode() + b'"'
    first = body.find(quoted, start)
    if first < 0 or first > len(body) * 3 // 4:
        return _UNSURE  # the walk would decode (nearly) everything anyway: one parse in C is cheaper
    if limit is None and (0 <= _first_container(body, start + 1) < first or _container_at(body, first + len(quoted))):
        return _UNSURE  # an object or list (or a bracket in a string) before the field, or as its value: as above
    try:
        text = body.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return _UNSURE
    index = _ws_text(text, start + 1)  # the whitespace before `{` is ASCII: bytes and characters agree
    try:
        while text[index:index + 1] == '"':
            key, index = scanstring(text, index + 1)
            index = _ws_text(text, index)
            if text[index:index + 1] != ":":
                return None
            index = _ws_text(text, index + 1)
            if limit is None and text[index:index + 1] in ("[", "{"):
                # A whole object or list to decode (before the field, or the field's own):
                # the walk would save little after it, and one parse in C has no loop around it.
                return _UNSURE
            if key == field:
                return _value(body, text, index, field, limit)
            _, index = _DECODER.raw_decode(text, index)
            index = _ws_text(text, index)
            if text[index:index + 1] != ",":
                return None  # the object's end (or junk) without the field: a full parse says None too
            index = _ws_text(text, index + 1)
    except (ValueError, RecursionError):
        return None  # malformed (or too deep) before the field: json.loads fails there too
    return None


def _value(body: bytes, text: str, index: int, field: str, limit: int | None) -> object:
    """The field's value at `index`, as `json_bytes` serialises it; `_UNSURE` when
    a later member might be the same field (the last one wins in a full parse).
    Only what follows the field can hold another: the walk decoded every key
    before it. The field is ASCII, so its bytes and a `\\u00XX` escape (the only
    way to spell an ASCII letter otherwise) are found in the bytes, in C."""
    after = len(text[:index].encode("utf-8", "surrogatepass")) if len(text) != len(body) else index
    if body.find(b'"' + field.encode() + b'"', after) >= 0:
        return _UNSURE
    if b"\\" in body and body.find(b"\\u00", after) >= 0 and any(
        chr(int(code, 16)) in field for code in _UNICODE_ESCAPE.findall(text, index)
    ):
        return _UNSURE
    if limit is None or text[index:index + 1] != "[":
        value, _ = _DECODER.raw_decode(text, index)
        return json_bytes(value, limit)
    # A list read to `limit`: its elements one by one, as compact JSON, until there is enough.
    parts, size = ["["], 1
    index = _ws_text(text, index + 1)
    if text[index:index + 1] == "]":
        return b"[]"
    while size <= limit:
        item, index = _DECODER.raw_decode(text, index)
        piece = _compact(item)
        parts.append(piece)
        size += len(piece)
        index = _ws_text(text, index)
        if text[index:index + 1] == "]":
            parts.append("]")
            break
        if text[index:index + 1] != ",":
            raise ValueError("malformed list")
        parts.append(",")
        size += 1
        index = _ws_text(text, index + 1)
    return "".join(parts).encode("utf-8", "surrogatepass")


def _first_container(body: bytes, start: int) -> int:
    """Where the first `[` or `{` byte after `start` is (-1: none), by two byte searches in C."""
    found = [at for at in (body.find(b"[", start), body.find(b"{", start)) if at >= 0]
    return min(found) if found else -1


def _container_at(body: bytes, index: int) -> bool:
    """Whether `: [` or `: {` (with any whitespace) follows `index`: an object or list as a member's value."""
    index = _ws(body, index)
    if body[index:index + 1] != b":":
        return False
    index = _ws(body, index + 1)
    return body[index:index + 1] in (b"[", b"{")


def _ws(body: bytes, index: int) -> int:
    while body[index:index + 1] in (b" ", b"\t", b"\n", b"\r"):
        index += 1
    return index


def _ws_text(text: str, index: int) -> int:
    return _WHITESPACE.match(text, index).end()  # type: ignore[union-attr]  # `[ \t\n\r]*` always matches


def cookie_value(header: bytes, name: bytes) -> bytes | None:
    """The value of cookie `name` in a `Cookie` header, or None."""
    for pair in header.split(b";"):
        key, sep, value = pair.strip().partition(b"=")
        if sep and key == name:
            return value.strip(b'"')
    return None


def _header(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for key, value in headers:
        if key == name:
            return value
    return None


@dataclass(frozen=True)
class KeyReader:
    """Where one backend's routing key is read."""

    kind: KeyKind
    name: str
    # How many bytes of a JSON value the policy reads (prefix_affinity); None: all.
    limit: int | None = None

    @classmethod
    def from_config(cls, config: RoutingConfig | None) -> KeyReader | None:
        source = None if config is None else config.key_source()
        if config is None or source is None:
            return None
        limit = config.prefix_bytes if config.policy is RoutingPolicy.PREFIX_AFFINITY else None
        return cls(source[0], source[1], limit)

    def read(self, request: WireRequest) -> bytes | None:
        """The request's key, or None when it carries none."""
        _method, _path, query, headers, body = request
        if self.kind is KeyKind.HEADER:
            return _header(headers, self.name.encode("latin-1"))
        if self.kind is KeyKind.COOKIE:
            wanted = self.name.encode("latin-1")
            for key, value in headers:
                found = cookie_value(value, wanted) if key == b"cookie" else None
                if found is not None:
                    return found
            return None
        if self.kind is KeyKind.QUERY:
            for name, text in parse_qsl(query.decode("latin-1"), keep_blank_values=True, encoding="latin-1"):
                if name == self.name:
                    return text.encode("latin-1")
            return None
        return json_key(body, self.name, self.limit)

    def read_call(self, args: tuple[object, ...]) -> bytes | None:
        """A handle call's key: a `json:` field of its first argument, a dict or
        a JSON body (bytes or text); None otherwise, as a handle call carries no
        header, cookie or query (it is then routed by power_of_two)."""
        first = args[0] if args else None
        if self.kind is not KeyKind.JSON or first is None:
            return None
        if isinstance(first, dict):
            found = json_bytes(first.get(self.name, _MISSING), self.limit)
            return found if found is None or self.limit is None else found[: self.limit]
        if isinstance(first, str):
            first = first.encode("utf-8", "surrogatepass")
        if isinstance(first, (bytes, bytearray, memoryview)):
            return json_key(bytes(first), self.name, self.limit)
        return None
