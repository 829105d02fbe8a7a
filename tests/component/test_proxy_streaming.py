"""Streamed answers and leaving clients in the proxy's ASGI app, driven
in-process with fake replicas whose answers stream (no Ray, no sockets)."""

from __future__ import annotations

import asyncio
import random
from typing import Any, Callable

from proxy.app import ProxyApp
from proxy.routes.subscriptions import Subscriptions
from proxy.settings import ProxySettings
from tests.support.streams import Client, StreamingCaller, StreamingReplica, request
from vocabulary.control.longpoll import ReplicaInfo, ReplicaSet, RouteEntry, RouteTable
from vocabulary.spec.endpoints import EndpointConfig


class Recorded:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, int]] = []
        self.first_bytes: list[tuple[str, str]] = []
        self.gaps: list[tuple[str, str, list[float]]] = []
        self.streams: list[tuple[str, str, int]] = []
        self.shadows: list[tuple[str, str, str]] = []

    def request_done(self, endpoint: str, backend: str, code: int, duration_s: float) -> None:
        self.requests.append((endpoint, backend, code))

    def shadow_done(self, endpoint: str, backend: str, result: str) -> None:
        self.shadows.append((endpoint, backend, result))

    def shadow_compared(self, endpoint: str, backend: str, matched: bool) -> None:
        raise AssertionError("a stream is never compared")

    def first_byte(self, endpoint: str, backend: str, seconds: float) -> None:
        self.first_bytes.append((endpoint, backend))

    def gap_observer(self, endpoint: str, backend: str) -> Callable[[float], None]:
        gaps: list[float] = []
        self.gaps.append((endpoint, backend, gaps))
        return gaps.append

    def stream_done(self, endpoint: str, backend: str, chunks: int) -> None:
        self.streams.append((endpoint, backend, chunks))


def proxy(backends: dict[str, StreamingReplica], timeout_s: float = 5.0,
          shadow: dict[str, float] | None = None) -> tuple[ProxyApp, Recorded]:
    recorded = Recorded()
    rng = random.Random(0)
    app = ProxyApp(StreamingCaller(), ProxySettings(), rng, recorded)  # type: ignore[arg-type]  # a fake caller with the streaming calls only
    subscriptions = Subscriptions(ProxySettings(), rng)
    config = EndpointConfig(name="e", route="/e", traffic={"v1": 1.0}, shadow=shadow or {}, timeout_s=timeout_s,
                            shadow_compare="json" if shadow else "none")
    answer: dict[str, Any] = {
        "routes": (1, RouteTable(entries=(RouteEntry(route="/e", methods=("GET",), endpoint="e"),))),
        "endpoint:e": (2, config),
    }
    for n, (name, replica) in enumerate(backends.items()):
        info = ReplicaInfo(replica_id=name, actor_name=name, handle=replica)
        answer[f"replicas:{name}"] = (3 + n, ReplicaSet(backend=name, max_concurrent_queries=10, replicas=(info,)))
    app.install(subscriptions.apply(answer))
    return app, recorded


def test_a_streamed_answer_reaches_the_client_chunk_by_chunk_and_completes() -> None:
    app, recorded = proxy({"v1": StreamingReplica([b"a;", b"b;"])})
    client = Client()
    asyncio.run(request(app, client))
    assert client.sent[0]["status"] == 200 and (b"content-type", b"text/event-stream") in client.sent[0]["headers"]
    assert [m["body"] for m in client.sent[1:]] == [b"first;", b"a;", b"b;", b""]
    assert client.complete()
    assert recorded.requests == [("e", "v1", 200)] and recorded.first_bytes == [("e", "v1")]


def test_each_gap_between_chunks_is_recorded_for_the_token_metrics() -> None:
    app, recorded = proxy({"v1": StreamingReplica([b"a;", b"b;", b"c;"], gap_s=0.05)})
    asyncio.run(request(app, Client()))
    [(endpoint, backend, gaps)] = recorded.gaps
    assert (endpoint, backend, len(gaps)) == ("e", "v1", 3)  # the head's chunk, then three more
    assert all(0.04 <= gap < 1.0 for gap in gaps), gaps
    assert recorded.streams == [("e", "v1", 4)]


def test_the_gaps_of_a_stream_still_open_are_recorded_as_they_come() -> None:
    """A long token stream's gaps reach the metrics while it runs; the proxy keeps none of them."""
    app, recorded = proxy({"v1": StreamingReplica([b"t;"] * 40, gap_s=0.05)})
    client = Client()

    async def scenario() -> int:
        streaming = asyncio.ensure_future(request(app, client))
        while not recorded.gaps or len(recorded.gaps[0][2]) < 3:
            await asyncio.sleep(0.01)
        ended_meanwhile = len(recorded.streams)
        client.leave.set()
        await streaming
        return ended_meanwhile

    assert asyncio.run(scenario()) == 0  # three gaps recorded, the stream not ended
    [(_, _, gaps)] = recorded.gaps
    assert recorded.streams == [("e", "v1", 1 + len(gaps))]  # ended by its client: the chunks it had
    assert 3 <= len(gaps) < 40


def test_a_gap_between_chunks_above_timeout_s_cuts_the_stream_and_counts_504() -> None:
    replica = StreamingReplica([b"slow"], gap_s=0.5)
    app, recorded = proxy({"v1": replica}, timeout_s=0.05)
    client = Client()
    asyncio.run(request(app, client))
    assert client.body() == b"first;" and not client.complete()
    assert recorded.requests == [("e", "v1", 504)] and replica.closed_early == 1


def test_timeout_s_bounds_each_gap_not_the_stream_nor_a_slow_client() -> None:
    # Six gaps of 0.6 x timeout_s: the stream lasts 3.6 x timeout_s, and no gap reaches it.
    app, recorded = proxy({"v1": StreamingReplica([b"a;"] * 6, gap_s=0.12)}, timeout_s=0.2)
    client = Client()
    asyncio.run(request(app, client))
    assert client.complete() and recorded.requests == [("e", "v1", 200)]

    class SlowClient(Client):
        async def send(self, message: dict[str, Any]) -> None:
            await asyncio.sleep(0.3)  # longer than timeout_s, while no chunk is awaited
            await super().send(message)

    app, recorded = proxy({"v1": StreamingReplica([b"a;", b"b;"])}, timeout_s=0.2)
    slow = SlowClient()
    asyncio.run(request(app, slow))
    assert slow.body() == b"first;a;b;" and slow.complete() and recorded.requests == [("e", "v1", 200)]


def test_a_replica_that_dies_mid_stream_cuts_it_and_counts_502() -> None:
    app, recorded = proxy({"v1": StreamingReplica([b"a;", b"b;"], dies_after=1)})
    client = Client()
    asyncio.run(request(app, client))
    assert client.body() == b"first;a;" and not client.complete()
    assert recorded.requests == [("e", "v1", 502)]


def test_a_client_that_leaves_mid_stream_closes_the_replicas_stream() -> None:
    replica = StreamingReplica([b"x"] * 100, gap_s=0.01)

    async def scenario() -> Client:
        app, _ = proxy({"v1": replica})
        client = Client()
        call = asyncio.ensure_future(request(app, client))
        while len(client.sent) < 4:
            await asyncio.sleep(0.005)
        client.leave.set()
        await call
        return client

    client = asyncio.run(scenario())
    assert not client.complete() and replica.closed_early == 1


def test_a_client_gone_before_the_streams_rest_is_read_has_the_replica_let_it_go_at_once() -> None:
    """The client left as the head went out: the relay stops before it first asks for the rest, so
    the replica (which holds an unclaimed stream until it gives it up, 30 s) is told to let it go."""
    replica = StreamingReplica([b"x"] * 100, gap_s=0.01)
    client = Client()
    client.leave.set()  # its disconnect is there as soon as the relay watches for it

    async def scenario() -> None:
        app, _ = proxy({"v1": replica})
        await request(app, client)

    asyncio.run(scenario())
    assert not client.complete() and replica.discarded == ["s1"]


def test_a_stream_that_completes_is_not_discarded() -> None:
    replica = StreamingReplica([b"a;", b"b;"])
    app, _ = proxy({"v1": replica})
    client = Client()
    asyncio.run(request(app, client))
    assert client.complete() and replica.discarded == []


def test_a_shadow_copy_that_streams_is_discarded_unread() -> None:
    shadow = StreamingReplica([b"never read"])
    app, recorded = proxy({"v1": StreamingReplica([]), "v2": shadow}, shadow={"v2": 1.0})

    async def scenario() -> None:
        await request(app, Client())
        for _ in range(1000):  # the copy runs on later turns of the loop
            if recorded.shadows:
                return
            await asyncio.sleep(0)

    asyncio.run(scenario())
    assert shadow.discarded == ["s1"] and recorded.shadows == [("e", "v2", "ok")]
