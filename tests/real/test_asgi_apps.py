"""ASGI apps as backends end to end: the shipped FastAPI app
(deployments/notes.toml) mounted under /notes behind the real controller and
proxy, used over HTTP on loopback with httpx and over WebSockets with the
`websockets` client library."""

from __future__ import annotations

import json
from typing import Iterator

import httpx
import pytest
import ray
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from controller.backend_state import REPLICA_PREFIX
from tests.real.examples import ShippedExamples, serve_shipped_examples

pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def served(ray_session: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ShippedExamples]:
    for examples in serve_shipped_examples(ray_session, tmp_path_factory.mktemp("code")):
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
