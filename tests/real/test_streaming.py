"""Streaming answers end to end: the shipped ticker (deployments/ticker.toml,
server-sent events) behind the real controller and proxy, read with httpx's
streaming client over HTTP on loopback; and a client that leaves cancelling
the replica's work, streaming or not."""

from __future__ import annotations

import json
import time
from typing import Iterator

import httpx
import pytest

from tests.support.examples import ShippedExamples, serve_shipped_examples
from tests.support.stack import eventually, met, quick_backend, run
from vocabulary.spec.endpoints import EndpointConfig

pytestmark = pytest.mark.real

INTERVAL_S = 0.5


@pytest.fixture(scope="module")
def served(ray_session: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ShippedExamples]:
    for examples in serve_shipped_examples(ray_session, tmp_path_factory.mktemp("code")):
        examples.backend("ticker", "ticker")
        examples.shipped_endpoint("ticker")
        yield examples


def events(response: httpx.Response, limit: int) -> Iterator[tuple[float, dict[str, int]]]:
    """(arrival time, payload) of each server-sent event, up to `limit`, as its bytes arrive.

    Parsed by hand: httpx's `iter_lines` holds a line back until more text follows it.
    """
    buffer, seen = "", 0
    for text in response.iter_text():
        buffer += text
        *complete, buffer = buffer.split("\n\n")
        for event in complete:
            data = [line[len("data: "):] for line in event.split("\n") if line.startswith("data: ")]
            yield time.perf_counter(), json.loads("".join(data))
            seen += 1
            if seen == limit:
                return


def stats(served: ShippedExamples, route: str) -> dict[str, int]:
    return httpx.get(served.url + route, timeout=10).json()


def test_server_sent_events_arrive_as_they_are_produced_and_in_order(served: ShippedExamples) -> None:
    with httpx.Client(base_url=served.url, timeout=10) as client:
        sent = time.perf_counter()
        with client.stream("GET", f"/ticker?count=5&interval_s={INTERVAL_S}") as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            arrived = list(events(response, 5))
    assert [payload["tick"] for _, payload in arrived] == [0, 1, 2, 3, 4]
    first = arrived[0][0] - sent
    assert first < INTERVAL_S, f"first event after {first:.3f} s"  # before the replica made the second
    gaps = [later - earlier for (earlier, _), (later, _) in zip(arrived, arrived[1:])]
    assert all(gap > INTERVAL_S / 2 for gap in gaps), gaps  # each came when made, not all at the end


def test_a_client_that_leaves_mid_stream_stops_the_generator_in_the_replica(served: ShippedExamples) -> None:
    before = stats(served, "/ticker/stats")
    with httpx.Client(base_url=served.url, timeout=10) as client:
        with client.stream("GET", "/ticker?count=50&interval_s=0.1") as response:
            assert [payload["tick"] for _, payload in events(response, 2)] == [0, 1]
    after = eventually(lambda: (s := stats(served, "/ticker/stats"))["cut_short"] > before["cut_short"] and s, 10,
                       what="the replica's generator cancelled")
    assert after["finished"] == before["finished"]


def test_a_client_that_leaves_cancels_a_slow_plain_handler(served: ShippedExamples) -> None:
    met(served.client, run(served.client.apply_backend(quick_backend("sleeper", "cancellable:Sleeper"))))
    met(served.client, run(served.client.apply_endpoint(
        EndpointConfig(name="sleeper", route="/sleeper", traffic={"sleeper": 1.0}, timeout_s=30)
    )))
    with pytest.raises(httpx.ReadTimeout):
        httpx.get(served.url + "/sleeper?s=20", timeout=httpx.Timeout(10, read=0.5))
    counted = eventually(lambda: (s := stats(served, "/sleeper/stats"))["cancelled"] == 1 and s, 10,
                         what="the slow handler cancelled")
    assert counted["finished"] == 0
