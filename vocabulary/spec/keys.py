"""One grammar for the `KIND:NAME` keys a spec reads from a request, and the HTTP token.

A routing policy's key (`[backends.X.routing] key`: header, cookie, query or
json), an endpoint's `sticky` (header or cookie) and its `[limits] key`
(header, cookie or query) are each `KIND:NAME`, checked by `request_key`:
KIND one of those the key allows; a header's or a cookie's NAME an HTTP
token (RFC 9110; RFC 6265 names cookies by tokens too), a header's
lower-cased (header names are case-insensitive); a query parameter's or a
JSON field's NAME any text that is not blank and holds no CR, LF or NUL.
`split_key` reads a checked key back as (`KeyKind`, name).

`HTTP_TOKEN` is the one shape of a header name a spec writes (these keys,
a match rule's `header`, the multiplex `header`). Values only.
"""

from __future__ import annotations

import enum
import re
from typing import Sequence

__all__ = ["HTTP_TOKEN", "KeyKind", "ROUTING_KINDS", "STICKY_KINDS", "LIMIT_KINDS", "key_forms", "request_key",
           "split_key", "header_name"]

# RFC 9110's token: the characters a header (field) name may have.
HTTP_TOKEN = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")


class KeyKind(str, enum.Enum):
    """Where a request key is read."""

    HEADER = "header"
    COOKIE = "cookie"
    QUERY = "query"
    JSON = "json"  # a top-level field of a JSON body (a handle call's first argument)


ROUTING_KINDS = (KeyKind.HEADER, KeyKind.COOKIE, KeyKind.QUERY, KeyKind.JSON)
STICKY_KINDS = (KeyKind.HEADER, KeyKind.COOKIE)
LIMIT_KINDS = (KeyKind.HEADER, KeyKind.COOKIE, KeyKind.QUERY)

def key_forms(kinds: Sequence[KeyKind]) -> str:
    """How a user writes a key of these kinds: "'header:NAME' or 'cookie:NAME'"."""
    forms = [f"'{kind.value}:{'FIELD' if kind is KeyKind.JSON else 'NAME'}'" for kind in kinds]
    return forms[0] if len(forms) == 1 else f"{', '.join(forms[:-1])} or {forms[-1]}"


def _name_fits(kind: KeyKind, name: str) -> bool:
    if kind in (KeyKind.HEADER, KeyKind.COOKIE):
        return HTTP_TOKEN.fullmatch(name) is not None
    return bool(name.strip()) and not any(c in name for c in "\r\n\0")


def request_key(key: str | None, kinds: Sequence[KeyKind]) -> str | None:
    """`key` as it is kept (a header's name lower-cased); ValueError naming the forms `kinds` allow."""
    if key is None:
        return None
    written, colon, name = key.partition(":")
    kind = next((kind for kind in kinds if kind.value == written), None)
    if not colon or kind is None or not _name_fits(kind, name):
        raise ValueError(f"must be {key_forms(kinds)} (got '{key}')")
    return f"header:{name.lower()}" if kind is KeyKind.HEADER else key


def split_key(key: str) -> tuple[KeyKind, str]:
    """A key `request_key` kept, as (where it is read, its name)."""
    kind, _, name = key.partition(":")
    return KeyKind(kind), name


def header_name(name: str) -> str:
    """A header name a spec writes, lower-cased; ValueError when it is not an HTTP token."""
    if HTTP_TOKEN.fullmatch(name) is None:
        raise ValueError(f"'{name}' is not an HTTP header name")
    return name.lower()
