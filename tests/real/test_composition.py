"""Composition end to end: the shipped pipeline (deployments/pipeline.toml),
whose backend calls a backend and an endpoint through `ray_gitops.serving` handles."""

from __future__ import annotations

import json
from collections import Counter
from typing import Iterator

import httpx
import pytest
import ray

from controller.state.backend_state import REPLICA_PREFIX
from tests.support.examples import ShippedExamples, serve_shipped_examples
from tests.support.faults import kill9
from tests.support.stack import eventually

pytestmark = pytest.mark.real

# Chi-square critical value for one degree of freedom at p = 0.001.
CHI2_DF1_P001 = 10.83
CALLS = 200


@pytest.fixture(scope="module")
def served(ray_session: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ShippedExamples]:
    for examples in serve_shipped_examples(ray_session, tmp_path_factory.mktemp("code")):
        # The callees first: the pipeline's constructor makes its handles.
        for backend in ("words", "tagger-v1", "tagger-v2"):
            examples.backend(backend, backend)
        examples.backend("pipeline", "pipeline", commit="c0ffee1")
        examples.shipped_endpoint("tagger")
        examples.shipped_endpoint("pipeline")
        yield examples


def test_a_backend_calls_a_backend_and_an_endpoint_split_by_its_weights(served: ShippedExamples) -> None:
    # In rounds of 8 concurrent calls: words takes 8 at a time (max_concurrent_queries).
    rounds = [served.burst("/pipeline", [json.dumps({"text": "a bb ccc"})] * 8) for _ in range(CALLS // 8)]
    answers = [response.json() for responses in rounds for response in responses]
    assert all(a["tags"] == ["a/1", "bb/2", "ccc/3"] and a["by"] == "pipeline" for a in answers), answers[:3]
    counts = Counter(answer["tagger"] for answer in answers)
    expected = CALLS / 2
    chi2 = sum((counts[label] - expected) ** 2 / expected for label in ("v1", "v2"))
    assert chi2 < CHI2_DF1_P001, counts


def test_backpressure_from_a_callee_is_a_clear_error_in_the_caller(served: ShippedExamples) -> None:
    served.backend("words", "words", max_concurrent_queries=1)
    slow = json.dumps({"text": "slow words", "pause_s": 1.0})

    def one_refused() -> list[httpx.Response] | None:
        responses = sorted(served.burst("/pipeline", [slow, slow]), key=lambda r: r.status_code)
        return responses if [r.status_code for r in responses] == [200, 503] else None

    # The caller's handles learn the new max_concurrent_queries by long poll.
    ok, refused = eventually(one_refused, 30)
    assert ok.status_code == 200 and ok.json()["tags"] == ["slow/4", "words/5"]
    assert "backend 'words' is at capacity" in refused.json()["error"]


def test_the_context_carries_the_applied_commit_and_follows_it_without_a_restart(served: ShippedExamples) -> None:
    body = json.dumps({"text": "a"})
    [first] = served.burst("/pipeline", [body])
    assert first.json()["commit"] == "c0ffee1"
    before = served.running_ids("pipeline")
    # A later commit changes the backend in place (here its max_concurrent_queries).
    served.backend("pipeline", "pipeline", commit="beef002", max_concurrent_queries=50)
    eventually(lambda: served.burst("/pipeline", [body])[0].json()["commit"] == "beef002", 30)
    assert served.running_ids("pipeline") == before


def test_a_callee_replica_that_died_is_left_out_of_the_callers_choices_at_once(served: ShippedExamples) -> None:
    served.backend("words", "words", num_replicas=2)
    eventually(lambda: len(served.running_ids("words")) == 2, 60, what="two words replicas")
    victim = sorted(served.running_ids("words"))[0]
    kill9(ray.get_actor(REPLICA_PREFIX + victim, namespace=served.namespace))
    body = json.dumps({"text": "a bb"})
    # One call at a time, at once after the kill: long before the controller's long poll
    # drops the replica, the first call that meets it (an error: the pipeline does not
    # catch HandleError) takes it out of the caller's choices; the rest meet the survivor.
    statuses = [served.burst("/pipeline", [body])[0].status_code for _ in range(40)]
    assert statuses.count(200) >= 39, statuses
