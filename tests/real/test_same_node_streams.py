"""Streams and WebSockets over the same-node data socket, end to end: the
shipped ticker (server-sent events) and notes app (a WebSocket chat) behind
the real controller and proxy on one node, whose replicas count what they
served over their Unix socket instead of Ray (`frames_streamed`)."""

from __future__ import annotations

import json
from typing import Any, Iterator

import httpx
import pytest
import ray
from ray.actor import ActorHandle
from websockets.sync.client import connect

from controller.state.backend_state import REPLICA_PREFIX
from tests.support.examples import ShippedExamples, serve_shipped_examples
from tests.support.stack import eventually
from vocabulary.control.actor_apis import Remote, ReplicaAPI

pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def served(ray_session: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ShippedExamples]:
    for examples in serve_shipped_examples(ray_session, tmp_path_factory.mktemp("code")):
        examples.backend("ticker", "ticker")
        examples.shipped_endpoint("ticker")
        examples.backend("notes", "notes")
        examples.shipped_endpoint("notes")
        yield examples


def replica(served: ShippedExamples, backend: str) -> ActorHandle[Any]:
    (replica_id,) = served.running_ids(backend)
    return ray.get_actor(REPLICA_PREFIX + replica_id, namespace=served.namespace)


def streamed(handle: ActorHandle[Any]) -> int:
    replica: Remote[ReplicaAPI] = Remote(handle)
    return int(ray.get(replica.call(ReplicaAPI.frames_streamed), timeout=30))


def test_a_stream_and_a_websocket_to_a_replica_on_the_proxys_node_go_over_its_unix_socket(
    served: ShippedExamples,
) -> None:
    ticker, notes = replica(served, "ticker"), replica(served, "notes")

    def ticks() -> bool:
        with httpx.Client(base_url=served.url, timeout=10) as client:
            with client.stream("GET", "/ticker?count=5&interval_s=0.01") as response:
                text = "".join(response.iter_text())
        payloads = [json.loads(line[len("data: "):]) for line in text.split("\n") if line.startswith("data: ")]
        assert [payload["tick"] for payload in payloads] == [0, 1, 2, 3, 4]
        return streamed(ticker) > 0

    # The proxy asks for the replica's socket in the background; until then, Ray carries it.
    eventually(ticks, 60, what="a stream served over the data socket")

    def chat() -> bool:
        with connect(served.url.replace("http://", "ws://") + "/notes/chat", open_timeout=10) as socket:
            assert json.loads(socket.recv(timeout=10)) == {"hello": "send text; 'bye' ends the chat"}
            socket.send("over frames")
            assert socket.recv(timeout=10) == "echo: over frames"
        return streamed(notes) > 0

    eventually(chat, 60, what="a WebSocket served over the data socket")
