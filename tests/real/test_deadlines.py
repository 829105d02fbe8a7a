"""Deadlines that travel, end to end (issue 46 item 3): a composition chain with a 200 ms client deadline
stops at the callee instead of running to its own time.

A real controller and proxy (Ray, HTTP on 127.0.0.1) serve `deadline_chain.Caller`, which calls
`deadline_chain.Callee` through a `ray_gitops.serving` handle; the callee sleeps 5 s unless stopped. A
client sends `X-Request-Timeout: 0.2`: it is answered 504 well within a second, the callee saw at most
0.2 s left (`time_left()`) and was cancelled there, and the proxy counted the deadline. A malformed header
is a 400 that says why, and a request without one carries no deadline (`time_left()` is None).
"""

from __future__ import annotations

import time
from typing import Any, Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.examples import ShippedExamples, serve_shipped_examples
from tests.support.stack import eventually, free_port, met, quick_backend, run
from vocabulary.spec.endpoints import EndpointConfig

pytestmark = pytest.mark.real

CALLEE = "deadline-callee"


@pytest.fixture(scope="module")
def metrics_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def served(ray_session: str, tmp_path_factory: pytest.TempPathFactory, metrics_port: int) -> Iterator[ShippedExamples]:
    for examples in serve_shipped_examples(ray_session, tmp_path_factory.mktemp("code"),
                                           proxy_metrics_port=metrics_port):
        client = examples.client
        met(client, run(client.apply_backend(quick_backend(CALLEE, "deadline_chain:Callee"))))
        met(client, run(client.apply_backend(quick_backend("deadline-caller", "deadline_chain:Caller"))))
        for name, backend in (("deadline-caller", "deadline-caller"), ("deadline-callee-stats", CALLEE)):
            met(client, run(client.apply_endpoint(
                EndpointConfig(name=name, route=f"/{name}", methods=["GET"], traffic={backend: 1.0}, timeout_s=10)
            )))
        yield examples


def callee_calls(served: ShippedExamples) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = httpx.get(served.url + "/deadline-callee-stats", timeout=10).json()["calls"]
    return calls


def deadlines_exceeded(metrics_port: int, endpoint: str, when: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text) for sample in family.samples
        if sample.name == "gitops_proxy_deadline_exceeded_total"
        and sample.labels == {"endpoint": endpoint, "when": when}
    )


def test_a_chain_with_a_200_ms_client_deadline_stops_at_the_callee(served: ShippedExamples, metrics_port: int) -> None:
    # Without a deadline the chain runs (the caller's handle subscribes on its first call): time_left() is None.
    plain = httpx.get(served.url + "/deadline-caller?s=0", timeout=30)
    assert plain.status_code == 200 and plain.json() == {"answer": "slept", "left": None}
    before = len(callee_calls(served))
    started = time.perf_counter()
    answer = httpx.get(served.url + "/deadline-caller?s=5", headers={"X-Request-Timeout": "0.2"}, timeout=30)
    took = time.perf_counter() - started
    print(f"\nclient deadline 0.2 s through a two-backend chain: 504 after {took * 1000:.0f} ms")
    assert answer.status_code == 504, (answer.status_code, answer.text)
    assert took < 1.0, took  # the callee's own time is 5 s
    # The callee saw the deadline the client set (less the way there) and stopped at it, cancelled.
    call = eventually(lambda: (calls := callee_calls(served))[before:] and calls[-1]["ended"] and calls[-1], 10,
                      what="the callee's call ended")
    assert 0 < call["left"] <= 0.2, call
    assert call["ended"] == "cancelled" and call["ran_s"] < 0.5, call
    eventually(lambda: deadlines_exceeded(metrics_port, "deadline-caller", "expired") >= 1, 15,
               what="the proxy counted the deadline exceeded")


def test_a_deadline_already_passed_reaches_no_replica(served: ShippedExamples, metrics_port: int) -> None:
    before = len(callee_calls(served))
    answer = httpx.get(served.url + "/deadline-caller?s=0", headers={"X-Request-Timeout": "0"}, timeout=30)
    assert answer.status_code == 504 and "passed before a replica was called" in answer.text
    assert len(callee_calls(served)) == before
    eventually(lambda: deadlines_exceeded(metrics_port, "deadline-caller", "not-started") >= 1, 15,
               what="the proxy counted the request it did not start")


def test_a_malformed_deadline_is_a_400_that_says_why(served: ShippedExamples) -> None:
    answer = httpx.get(served.url + "/deadline-caller?s=0", headers={"X-Request-Timeout": "soon"}, timeout=30)
    assert answer.status_code == 400
    assert answer.text == "Bad Request: X-Request-Timeout must be a number of seconds >= 0, such as 0.5 (got 'soon')"
