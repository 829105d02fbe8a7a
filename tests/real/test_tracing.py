"""Traces end to end: a real controller, proxy and replicas (the shipped pipeline,
which calls a backend and an endpoint through handles) exporting over OTLP/HTTP to
a loopback receiver that decodes the protobuf (`tests.support.otlp`)."""

from __future__ import annotations

import json
import time
from typing import Iterator

import httpx
import pytest

from tests.support.examples import ShippedExamples, serve_shipped_examples
from tests.support.otlp import OtlpReceiver, ReceivedSpan

pytestmark = pytest.mark.real

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
# Spans of one pipeline request: the proxy's, the pipeline replica's, its two handle
# calls and the two callees' (words, then a tagger version behind the tagger endpoint).
EXPECTED = 6


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as receiver:
        yield receiver


@pytest.fixture(scope="module")
def served(
    ray_session: str, tmp_path_factory: pytest.TempPathFactory, receiver: OtlpReceiver
) -> Iterator[ShippedExamples]:
    code = tmp_path_factory.mktemp("code")
    for examples in serve_shipped_examples(ray_session, code, otlp_endpoint=receiver.url):
        for backend in ("words", "tagger-v1", "tagger-v2"):
            examples.backend(backend, backend, commit="feed001")
        examples.backend("pipeline", "pipeline", commit="c0ffee1")
        examples.shipped_endpoint("tagger")
        examples.shipped_endpoint("pipeline")
        yield examples


def _in_trace(spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
    return [span for span in spans if span.trace_id == TRACE_ID]


def test_a_sampled_request_yields_one_trace_through_proxy_replica_and_composed_backends(
    served: ShippedExamples, receiver: OtlpReceiver
) -> None:
    headers = {"traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN}-01", "content-type": "application/json"}
    response = httpx.post(served.url + "/pipeline", content=json.dumps({"text": "a bb"}), headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    tagger = response.json()["tagger"]

    spans = _in_trace(receiver.wait_for_spans(lambda found: len(_in_trace(found)) >= EXPECTED))
    assert len(spans) == EXPECTED, [(s.service, s.name) for s in spans]
    by_id = {span.span_id: span for span in spans}

    (proxy,) = [s for s in spans if s.name == "proxy.request"]
    assert proxy.service == "gitops-proxy" and proxy.parent_span_id == CLIENT_SPAN
    assert proxy.attributes["gitops.endpoint"] == "pipeline"
    assert proxy.attributes["gitops.backend"] == "pipeline"
    assert proxy.attributes["gitops.commit"] == "c0ffee1"
    assert proxy.attributes["http.response.status_code"] == 200
    assert proxy.attributes["http.response.body.size"] == len(response.content)
    assert proxy.attributes["gitops.replica"]

    (handler,) = [s for s in spans if s.name == "replica.request"]
    assert handler.parent_span_id == proxy.span_id and handler.service == "gitops-replica"
    assert handler.attributes["gitops.backend"] == "pipeline"
    assert handler.attributes["gitops.replica"] == proxy.attributes["gitops.replica"]

    calls = {s.attributes["gitops.handle.target"]: s for s in spans if s.name == "handle.call"}
    assert set(calls) == {"words", "tagger"}
    assert all(call.parent_span_id == handler.span_id for call in calls.values())
    assert calls["tagger"].attributes["gitops.handle.backend"] == f"tagger-{tagger}"

    callees = {s.attributes["gitops.backend"]: s for s in spans if s.name == "replica.call"}
    assert set(callees) == {"words", f"tagger-{tagger}"}
    assert by_id[callees["words"].parent_span_id] is calls["words"]
    assert by_id[callees[f"tagger-{tagger}"].parent_span_id] is calls["tagger"]

    for span in spans:
        # Every span says the endpoint the request came in by, its backend and that backend's commit.
        assert span.attributes["gitops.endpoint"] == "pipeline", span
        assert span.attributes["gitops.backend"], span
        expected = "c0ffee1" if span.attributes["gitops.backend"] == "pipeline" else "feed001"
        assert span.attributes["gitops.commit"] == expected, span


def test_requests_without_a_sampled_parent_are_not_traced_at_the_default_share(
    served: ShippedExamples, receiver: OtlpReceiver
) -> None:
    before = len(receiver.spans())
    unsampled = {"traceparent": f"00-{'1' * 32}-{CLIENT_SPAN}-00"}
    responses = served.burst("/pipeline", [json.dumps({"text": "x"})] * 4)
    responses.append(
        httpx.post(served.url + "/pipeline", content=json.dumps({"text": "y"}), headers=unsampled, timeout=30)
    )
    assert all(r.status_code == 200 for r in responses)
    time.sleep(3)  # well past the exporters' batch delay (1 s): nothing more arrives
    assert receiver.spans()[before:] == []
