"""The shipped example repository (deployments/) is valid and says what it promises."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitops.specs.loading import Loader
from vocabulary.spec.state import ServingState

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def shipped() -> ServingState:
    result = Loader().load_directory(REPO_ROOT / "deployments", root=REPO_ROOT)
    assert result.ok, [str(error) for error in result.errors]
    assert result.state is not None
    return result.state


def test_the_shipped_deployments_are_valid(shipped: ServingState) -> None:
    assert len(shipped.backends) >= 3 and len(shipped.endpoints) >= 3


def test_echo_is_split_ninety_ten_between_two_versions(shipped: ServingState) -> None:
    assert shipped.endpoints["echo"].traffic == {"echo-v1": 0.9, "echo-v2": 0.1}
    assert shipped.backends["echo-v1"].version != shipped.backends["echo-v2"].version


def test_the_text_model_is_configured_through_user_config(shipped: ServingState) -> None:
    config = shipped.backends["sentiment"].user_config
    assert {"positive", "negative", "threshold"} <= set(config)


def test_an_endpoint_shadows_a_share_of_its_traffic_to_a_candidate(shipped: ServingState) -> None:
    shadowed = [endpoint for endpoint in shipped.endpoints.values() if endpoint.shadow]
    assert shadowed and all(0 < share < 1 for e in shadowed for share in e.shadow.values())


def test_the_examples_fit_a_two_core_laptop(shipped: ServingState) -> None:
    most_replicas = sum(
        b.autoscaling.max_replicas if b.autoscaling else b.num_replicas for b in shipped.backends.values()
    )
    cpus = round(sum(b.ray_actor_options.get("num_cpus", 1) for b in shipped.backends.values()), 6)
    # Sixteen small actors (the composed pipeline alone has four, the canary two) in about 2 GB.
    assert most_replicas <= 16 and cpus <= 1


# --- the example user code answers as its specs promise ------------------------


def request(query: bytes = b"", body: bytes = b"", method: str = "GET"):
    from starlette.requests import Request

    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    scope = {"type": "http", "method": method, "path": "/x", "query_string": query, "headers": []}
    return Request(scope, receive)


def test_echo_answers_with_its_version_label() -> None:
    import asyncio

    from deployments.apps.echo import Echo

    reply = asyncio.run(Echo("v2")(request(b"a=1", b"ping", "POST")))
    assert reply["version"] == "v2" and reply["body"] == "ping" and reply["query"] == {"a": "1"}


def test_the_sentiment_model_is_retuned_by_reconfigure() -> None:
    import asyncio
    import json

    from deployments.apps.sentiment import SentimentModel

    model = SentimentModel()
    model.reconfigure({"positive": ["fast"], "negative": ["slow"], "threshold": 0.1})
    reply = asyncio.run(model(request(body=b'{"text": "fast and not slow"}', method="POST")))
    assert json.loads(reply.body)["label"] == "positive"
    model.reconfigure({"positive": [], "negative": ["fast"], "threshold": 0.1})
    reply = asyncio.run(model(request(b"text=fast")))
    assert json.loads(reply.body)["label"] == "negative"


def test_the_keyword_candidate_differs_from_the_primary() -> None:
    from deployments.apps.keywords import extract, extract_phrases

    query = b"text=ray+cluster+runs+ray+cluster+jobs"
    assert extract(request(query))["keywords"][:2] == ["ray", "cluster"]
    assert "ray cluster" in extract_phrases(request(query))["keywords"]
