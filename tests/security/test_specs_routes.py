"""Routes as the proxy matches them (row 6, validation side): a route the proxy
would refuse or decode differently is refused at validation, located."""

from __future__ import annotations

import pytest

from gitops.sources.trees import MemoryTree
from gitops.specs.loading import Loader

ECHO_PY = "class Echo:\n    def __call__(self, request):\n        return 'hi'\n"
BACKEND = '[backends.echo]\nimport_path = "apps.echo:Echo"\n\n'


def errors(*routes: str) -> list[str]:
    endpoints = "".join(
        f'[endpoints.e{index}]\nroute = "{route}"\ntraffic = {{ echo = 1.0 }}\n\n' for index, route in enumerate(routes)
    )
    tree = MemoryTree({"apps/echo.py": ECHO_PY, "deployments/echo.toml": BACKEND + endpoints})
    result = Loader().load_tree(tree)
    assert result.state is None
    return [str(error) for error in result.errors]


@pytest.mark.parametrize("route", ["/api/../admin", "/api/./x", "/..", "/api/.."])
def test_a_route_with_a_dot_segment_is_refused(route: str) -> None:
    assert errors(route) == [
        f"deployments/echo.toml:5:1: endpoints.e0.route: must not contain '.' or '..' segments: "
        f"the proxy refuses such paths (got '{route}')"
    ]


@pytest.mark.parametrize("route", ["/api/%2e%2e/admin", "/a%20b", "/a\\\\b", "/caf\u00e9", "/a\\u0001b"])
def test_a_route_with_escapes_or_characters_the_proxy_decodes_is_refused(route: str) -> None:
    written = route.replace("\\\\", "\\").replace("\\u0001", "\\x01")
    assert errors(route) == [
        "deployments/echo.toml:5:1: endpoints.e0.route: must be written as the proxy matches it: "
        f"letters, digits and -._~!$&'()*+,;=:@ between slashes, no '%' escapes (got '{written}')"
    ]


def test_routes_differing_only_in_slashes_are_one_route() -> None:
    assert errors("/e", "//e//") == [
        "deployments/echo.toml:9:1: endpoints.e1.route: '//e//' is already the route of endpoint 'e0' "
        "(deployments/echo.toml:5:1)"
    ]
