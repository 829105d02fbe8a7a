"""Circuit limits (`proxy.pool.circuit`) and the `[circuit]` table's ranges."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from proxy.pool.circuit import Circuit, Limit
from vocabulary.spec.traffic_policy import CircuitConfig


def test_a_request_waits_in_line_only_behind_fewer_than_max_pending_requests() -> None:
    circuit, config = Circuit(), CircuitConfig(max_pending_requests=2)
    assert circuit.may_wait(0, config) and circuit.may_wait(1, config)
    assert not circuit.may_wait(2, config) and not circuit.may_wait(5, config)
    assert circuit.refused == {Limit.PENDING: 2, Limit.RETRIES: 0}
    assert circuit.may_wait(10_000, None), "without the table only the proxy's own queue bound holds"


def test_retries_in_flight_are_bounded_and_free_their_place_when_they_end() -> None:
    circuit, config = Circuit(), CircuitConfig(max_retries=2)
    for _ in range(2):
        assert circuit.may_retry(config)
        circuit.retry_started()
    assert not circuit.may_retry(config)
    circuit.retry_ended()
    assert circuit.may_retry(config)
    assert circuit.refused[Limit.RETRIES] == 1
    assert circuit.may_retry(None)


@pytest.mark.parametrize("keys, message", [
    ({"max_pending_requests": -1}, "greater than or equal to 0"),
    ({"max_retries": 100_001}, "less than or equal to 100000"),
])
def test_a_table_out_of_range_is_refused(keys: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        CircuitConfig(**keys)  # type: ignore[arg-type]
