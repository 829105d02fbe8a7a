"""Reading a routing key out of a request: a header, a cookie, a query parameter or a JSON field.

`KeyReader` reads where `[backends.X.routing] key` says; `json_field` reads a
top-level field of a JSON body for both a routing key and an endpoint's
`match = [{ json = FIELD, ... }]` rule. The body is the one the proxy has
already read under its body limit, so nothing here reads more. A body that
is not a JSON object, or lacks the field, gives None (the request is then
routed by the default policy or the weights), never an error.

A JSON value becomes bytes as compact JSON (a string: its UTF-8 text), so
`prefix_bytes` counts bytes of that serialisation. Pure: no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence
from urllib.parse import parse_qsl

from vocabulary.configs import RoutingConfig, RoutingKey, RoutingPolicy
from vocabulary.wire import WireRequest

__all__ = ["KeyReader", "json_field", "json_bytes", "cookie_value"]

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

    kind: RoutingKey
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
        if self.kind is RoutingKey.HEADER:
            return _header(headers, self.name.encode("latin-1"))
        if self.kind is RoutingKey.COOKIE:
            wanted = self.name.encode("latin-1")
            for key, value in headers:
                found = cookie_value(value, wanted) if key == b"cookie" else None
                if found is not None:
                    return found
            return None
        if self.kind is RoutingKey.QUERY:
            for name, text in parse_qsl(query.decode("latin-1"), keep_blank_values=True, encoding="latin-1"):
                if name == self.name:
                    return text.encode("latin-1")
            return None
        return json_bytes(json_field(body, self.name), self.limit)
