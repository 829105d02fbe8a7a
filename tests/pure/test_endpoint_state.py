"""Endpoint validation and the route table; every bad request changes nothing."""

from __future__ import annotations

import pytest

from controller.state.endpoint_state import EndpointState, check_backend_deletable
from vocabulary.spec.endpoints import EndpointConfig

BACKENDS = {"a", "b"}


def endpoint(name: str = "api", route: str = "/api", **extra) -> EndpointConfig:
    extra.setdefault("traffic", {"a": 1.0})
    return EndpointConfig(name=name, route=route, **extra)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (endpoint(traffic={"zzz": 1.0}), "traffic names unknown backend(s) zzz"),
        (endpoint(traffic={"a": 0.5, "b": 0.4}), "traffic weights sum to 0.9, not 1"),
        (endpoint(shadow={"nope": 0.1}), "shadow names unknown backend(s) nope"),
        (endpoint(route="api"), "must start with '/'"),
        (endpoint(traffic={}), "at least one backend"),
    ],
)
def test_invalid_endpoint_is_refused_with_a_clear_message_and_nothing_changes(bad, message):
    state = EndpointState()
    state.apply(endpoint(), BACKENDS)
    with pytest.raises(ValueError, match="endpoint 'api'") as raised:
        state.apply(bad, BACKENDS)
    assert message in str(raised.value)
    assert state.get("api") == endpoint()


def test_two_endpoints_cannot_share_a_route():
    state = EndpointState()
    state.apply(endpoint(), BACKENDS)
    with pytest.raises(ValueError, match="already used by endpoint 'api'"):
        state.apply(endpoint(name="other"), BACKENDS)


def test_reapplying_the_same_endpoint_changes_nothing():
    state = EndpointState()
    assert state.apply(endpoint(), BACKENDS) is True
    assert state.apply(endpoint(), BACKENDS) is False


def test_route_table_lists_every_endpoint_route_and_methods():
    state = EndpointState()
    state.apply(endpoint(), BACKENDS)
    state.apply(endpoint(name="b", route="/b", methods=("POST",), traffic={"b": 1.0}), BACKENDS)
    table = state.route_table()
    assert [(e.route, e.methods, e.endpoint) for e in table.entries] == [
        ("/api", ("GET", "POST"), "api"),
        ("/b", ("POST",), "b"),
    ]


def test_backend_with_traffic_or_shadow_cannot_be_deleted():
    state = EndpointState()
    state.apply(endpoint(traffic={"a": 1.0}, shadow={"b": 0.1}), BACKENDS)
    for backend in ("a", "b"):
        with pytest.raises(ValueError, match=f"backend '{backend}' still receives traffic from endpoint"):
            check_backend_deletable(backend, state)


def test_endpoints_survive_a_json_round_trip():
    state = EndpointState()
    state.apply(endpoint(shadow={"b": 0.25}), BACKENDS)
    assert EndpointState.from_json(state.to_json()).all() == state.all()


def test_a_route_differing_only_in_slashes_is_the_same_route():
    state = EndpointState()
    state.apply(endpoint(), BACKENDS)
    with pytest.raises(ValueError, match="endpoint 'other': route /api/ is already used by endpoint 'api'"):
        state.apply(endpoint(name="other", route="/api/"), BACKENDS)
