"""Batching end to end: the shipped batched model (deployments/batched.toml)
behind the real controller and proxy, over HTTP on loopback."""

from __future__ import annotations

from typing import Iterator

import httpx
import pytest

from tests.support.examples import ShippedExamples, serve_shipped_examples
from tests.support.stack import eventually
from vocabulary.spec.backends import BatchingConfig

pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def served(ray_session: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ShippedExamples]:
    yield from serve_shipped_examples(ray_session, tmp_path_factory.mktemp("code"))


def batch_answers(served: ShippedExamples, route: str, bodies: list[str]) -> list[dict[str, int]]:
    responses = served.burst(route, bodies)
    assert [r.status_code for r in responses] == [200] * len(bodies)
    return [r.json() for r in responses]


def test_an_idle_batched_backend_hands_each_request_over_as_a_batch_of_one(served: ShippedExamples) -> None:
    served.backend("vowels", "vowels-idle")
    served.endpoint("vowels", "idle", "vowels-idle")
    with httpx.Client(base_url=served.url, timeout=10) as client:
        answers = [client.post("/idle", content=text).json() for text in ("banana", "sky", "queue")]
    assert answers == [
        {"vowels": 3, "batch_size": 1}, {"vowels": 0, "batch_size": 1}, {"vowels": 4, "batch_size": 1},
    ]


def test_concurrent_requests_reach_the_handler_in_batches_of_more_than_one(served: ShippedExamples) -> None:
    served.backend("vowels", "vowels-busy")
    served.endpoint("vowels", "busy", "vowels-busy")
    answers = batch_answers(served, "/busy", ["a" * n for n in range(32)])
    assert [answer["vowels"] for answer in answers] == list(range(32))
    sizes = [answer["batch_size"] for answer in answers]
    assert max(sizes) > 1 and max(sizes) <= 8


def test_a_new_max_batch_size_applies_in_place_without_a_restart(served: ShippedExamples) -> None:
    served.backend("vowels", "vowels-tuned")
    served.endpoint("vowels", "tuned", "vowels-tuned")
    before = served.running_ids("vowels-tuned")
    served.backend("vowels", "vowels-tuned", batching=BatchingConfig(max_batch_size=2, batch_wait_timeout_s=0.05))

    def largest_batch() -> int:
        return max(answer["batch_size"] for answer in batch_answers(served, "/tuned", ["aeiou"] * 16))

    eventually(lambda: largest_batch() == 2, 30, what="batches of at most 2 after the change")
    assert served.running_ids("vowels-tuned") == before
