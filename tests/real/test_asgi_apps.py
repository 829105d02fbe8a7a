"""ASGI apps as backends end to end: the shipped FastAPI app
(deployments/notes.toml) mounted under /notes behind the real controller and
proxy, used over HTTP on loopback with httpx and over WebSockets with the
`websockets` client library; the proxy's metrics port counts the sessions."""

from __future__ import annotations

import json
from typing import Iterator

import httpx
import pytest
import ray
from prometheus_client.parser import text_string_to_metric_families
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from controller.state.backend_state import REPLICA_PREFIX
from tests.support.examples import ShippedExamples, serve_shipped_examples
from tests.support.stack import eventually, free_port

pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def metrics_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def served(ray_session: str, tmp_path_factory: pytest.TempPathFactory, metrics_port: int) -> Iterator[ShippedExamples]:
    for examples in serve_shipped_examples(ray_session, tmp_path_factory.mktemp("code"),
                                           proxy_metrics_port=metrics_port):
        examples.backend("notes", "notes")
        examples.shipped_endpoint("notes")
        yield examples


@pytest.fixture
def client(served: ShippedExamples) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served.url + "/notes", timeout=10) as opened:
        yield opened


def ws_url(served: ShippedExamples, path: str) -> str:
    return served.url.replace("http://", "ws://") + path


def test_a_fastapi_app_routes_path_parameters_and_pydantic_bodies_under_its_prefix(client: httpx.Client) -> None:
    created = client.post("/items", json={"text": "milk", "tags": ["shopping"]})
    assert created.status_code == 201
    note_id = created.json()["id"]
    assert client.get(f"/items/{note_id}").json() == {"text": "milk", "tags": ["shopping"]}
    assert client.get("/items/999999").status_code == 404


def test_a_body_that_fails_the_pydantic_model_is_answered_422_by_fastapi(client: httpx.Client) -> None:
    refused = client.post("/items", json={"text": "", "tags": "not a list"})
    assert refused.status_code == 422
    assert {tuple(error["loc"]) for error in refused.json()["detail"]} == {("body", "text"), ("body", "tags")}
    assert client.get("/items/not-a-number").status_code == 422


def test_the_apps_docs_are_served_behind_the_prefix(client: httpx.Client) -> None:
    docs = client.get("/docs")
    assert docs.status_code == 200 and "/notes/openapi.json" in docs.text
    assert "/items/{note_id}" in client.get("/openapi.json").json()["paths"]


def test_a_websocket_gets_the_apps_greeting_and_echoes_both_ways(served: ShippedExamples) -> None:
    with connect(ws_url(served, "/notes/chat"), open_timeout=10) as socket:
        assert json.loads(socket.recv(timeout=10)) == {"hello": "send text; 'bye' ends the chat"}
        for text in ("one", "two"):
            socket.send(text)
            assert socket.recv(timeout=10) == f"echo: {text}"


def test_the_apps_close_code_reaches_the_client(served: ShippedExamples) -> None:
    with connect(ws_url(served, "/notes/chat"), open_timeout=10) as socket:
        socket.recv(timeout=10)
        socket.send("bye")
        with pytest.raises(ConnectionClosed) as closed:
            socket.recv(timeout=10)
    assert closed.value.rcvd is not None and (closed.value.rcvd.code, closed.value.rcvd.reason) == (4000, "bye")


def test_a_websocket_to_an_unknown_route_is_refused(served: ShippedExamples) -> None:
    with pytest.raises(Exception) as refused:
        connect(ws_url(served, "/no-such-route"), open_timeout=10)
    assert "403" in str(refused.value)


def test_a_replica_that_dies_closes_its_websockets_with_1011(served: ShippedExamples) -> None:
    served.backend("notes", "notes-doomed")
    served.endpoint("notes", "doomed", "notes-doomed")
    (replica_id,) = served.running_ids("notes-doomed")
    with connect(ws_url(served, "/doomed/chat"), open_timeout=10) as socket:
        socket.recv(timeout=10)
        ray.kill(ray.get_actor(REPLICA_PREFIX + replica_id, namespace=served.namespace))
        with pytest.raises(ConnectionClosed) as closed:
            socket.recv(timeout=30)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011


def sessions(metrics_port: int, endpoint: str, code: str) -> float:
    """`gitops_http_requests_total` of `endpoint` on the notes backend with `code`, from the proxy's metrics port."""
    text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text) for sample in family.samples
        if sample.name == "gitops_http_requests_total"
        and sample.labels == {"endpoint": endpoint, "backend": "notes", "code": code}
    )


def test_a_websocket_session_is_counted_101_and_one_the_app_refuses_with_its_403(
    served: ShippedExamples, metrics_port: int,
) -> None:
    served.endpoint("notes", "counted", "notes")  # its own endpoint: no other test's session lands in its counts
    with connect(ws_url(served, "/counted/chat"), open_timeout=10) as socket:
        socket.recv(timeout=10)
        socket.send("bye")
        with pytest.raises(ConnectionClosed):
            socket.recv(timeout=10)
    with pytest.raises(InvalidStatus) as status:
        connect(ws_url(served, "/counted/no-such-socket"), open_timeout=10)  # FastAPI closes it before accepting
    assert status.value.response.status_code == 403
    eventually(lambda: (sessions(metrics_port, "counted", "101"), sessions(metrics_port, "counted", "403")) == (1, 1),
               30, what="both sessions counted")
