"""Route matching: longest segment-aligned prefix wins; method check gives 405 with Allow."""

from __future__ import annotations

import pytest

from proxy.routes.routing import Resolution, Route, RouteIndex, resolve


def index(*routes: tuple[str, tuple[str, ...], str]) -> RouteIndex:
    return RouteIndex.build(Route.build(prefix, methods, endpoint) for prefix, methods, endpoint in routes)


TABLE = index(
    ("/a", ("GET", "POST"), "a"),
    ("/a/b", ("GET",), "ab"),
    ("/", ("GET",), "root"),
    ("/api/v1/", ("POST",), "v1"),
)


@pytest.mark.parametrize(
    "path, endpoint",
    [
        ("/a", "a"),
        ("/a/", "a"),
        ("/a/x", "a"),
        ("/a/x/y", "a"),
        ("/a/b", "ab"),
        ("/a/b/c", "ab"),
        ("/a/bc", "a"),
        ("/ab", "root"),
        ("/", "root"),
        ("/anything/else", "root"),
        ("/api/v1", "v1"),
        ("/api/v1/predict", "v1"),
    ],
)
def test_longest_segment_aligned_prefix_wins(path: str, endpoint: str) -> None:
    resolution, route = resolve(TABLE, path, "GET" if endpoint != "v1" else "POST")
    assert resolution is Resolution.MATCHED
    assert route is not None and route.endpoint == endpoint


def test_a_prefix_does_not_match_a_longer_segment() -> None:
    table = index(("/a", ("GET",), "a"))
    assert resolve(table, "/ab", "GET") == (Resolution.NOT_FOUND, None)


def test_no_route_is_not_found() -> None:
    assert resolve(index(), "/a", "GET") == (Resolution.NOT_FOUND, None)


def test_wrong_method_is_not_allowed_with_the_allowed_methods() -> None:
    resolution, route = resolve(TABLE, "/a/b", "POST")
    assert resolution is Resolution.METHOD_NOT_ALLOWED
    assert route is not None and route.allow == "GET, HEAD"


def test_the_longest_prefix_decides_the_method_check_without_falling_back() -> None:
    # /a/b only allows GET; a POST there must not silently go to /a.
    resolution, _ = resolve(TABLE, "/a/b/x", "POST")
    assert resolution is Resolution.METHOD_NOT_ALLOWED


def test_head_is_allowed_wherever_get_is() -> None:
    assert resolve(TABLE, "/a", "HEAD")[0] is Resolution.MATCHED
    assert resolve(TABLE, "/api/v1", "HEAD")[0] is Resolution.METHOD_NOT_ALLOWED
