"""Route matching: which endpoint a request path and method belong to.

Pure: a `RouteIndex` is built once per route table and `resolve` is a
function of (index, path, method). The longest matching prefix wins, and a
prefix matches only at a path-segment boundary: `/a` matches `/a` and `/a/x`
but not `/ab`. Not here: what happens to the request afterwards.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Iterable

__all__ = ["Route", "RouteIndex", "Resolution", "resolve", "normalise_prefix"]


class Resolution(str, enum.Enum):
    MATCHED = "matched"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    NOT_FOUND = "not_found"


@dataclass(frozen=True)
class Route:
    prefix: str
    methods: frozenset[str]
    endpoint: str
    # The `Allow` header value for a 405, computed once.
    allow: str

    @classmethod
    def build(cls, prefix: str, methods: Iterable[str], endpoint: str) -> "Route":
        allowed = {m.upper() for m in methods}
        # A route that serves GET also answers HEAD, as every HTTP server does.
        if "GET" in allowed:
            allowed.add("HEAD")
        return cls(normalise_prefix(prefix), frozenset(allowed), endpoint, ", ".join(sorted(allowed)))


@dataclass(frozen=True)
class RouteIndex:
    by_prefix: dict[str, Route] = field(default_factory=dict)

    @classmethod
    def build(cls, routes: Iterable[Route]) -> "RouteIndex":
        return cls({route.prefix: route for route in routes})


def normalise_prefix(prefix: str) -> str:
    """`/a/` and `/a` are the same route; `/` stays `/`."""
    return "/" + prefix.strip("/")


def resolve(index: RouteIndex, path: str, method: str) -> tuple[Resolution, Route | None]:
    route = _longest_prefix(index.by_prefix, path)
    if route is None:
        return Resolution.NOT_FOUND, None
    if method not in route.methods:
        return Resolution.METHOD_NOT_ALLOWED, route
    return Resolution.MATCHED, route


def _longest_prefix(by_prefix: dict[str, Route], path: str) -> Route | None:
    # Walk up the path one segment at a time: depth-many dict lookups,
    # independent of how many routes exist.
    candidate = path.rstrip("/") or "/"
    while True:
        route = by_prefix.get(candidate)
        if route is not None:
            return route
        if candidate == "/":
            return None
        cut = candidate.rfind("/")
        candidate = candidate[:cut] or "/"
