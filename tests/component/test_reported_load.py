"""Replica-reported load: user code reports it, every answer carries it, the proxy keeps it and never forwards it."""

from __future__ import annotations

import pytest

from ray_gitops.registry import REPORTED_LOAD
from replica.calling.conversions import to_wire_response
from tests.support.proxy_app import FakeReplica, Proxy, get, run
from vocabulary.replicas.serving import ReportedLoad
from vocabulary.request_path.wire import LOAD_HEADER, WireRequest, WireResponse


@pytest.mark.parametrize("bad", [-1, float("inf"), float("nan")])
def test_a_reported_load_is_a_finite_number_not_below_zero(bad: float) -> None:
    with pytest.raises(ValueError, match="finite number >= 0"):
        ReportedLoad().report(bad)


def test_answers_carry_the_newest_reported_load_as_their_last_header() -> None:
    assert LOAD_HEADER not in dict(to_wire_response({"a": 1})[1])  # nothing reported yet
    try:
        REPORTED_LOAD.report(2.5)
        status, headers, body = to_wire_response({"a": 1})
        assert headers[-1] == (LOAD_HEADER, b"2.5") and body == b'{"a":1}'
    finally:
        REPORTED_LOAD.value = None


def test_the_proxy_keeps_a_replica_s_reported_load_and_strips_it_from_the_answer() -> None:
    async def loaded(request: WireRequest) -> WireResponse:
        return 200, [(b"content-type", b"text/plain"), (LOAD_HEADER, b"0.75")], b"ok"

    replica = FakeReplica("r0", loaded)
    proxy = Proxy()
    proxy.serve("e", "/e", {"b": [replica]})
    response = run(get(proxy, "/e"))
    assert response.status_code == 200 and response.text == "ok"
    assert ":load" not in response.headers
    slot = proxy.app.snapshot.pools["b"]._slots[0]
    assert slot.reported == 0.75
