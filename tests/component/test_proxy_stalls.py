"""A replica that hangs (alive, health check or not) is found stalled by the proxy's app, in-process.

The app with fake replicas behind a fake caller: two calls that run out the
endpoint's timeout on a replica that answers nothing take it out of routing
at once, its other calls are retried elsewhere (GET) or answered 504, and it
is listed for the controller until the controller stops listing it.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import httpx

from proxy.app import NullRecorder, ProxyApp
from proxy.pool.calling import Batching
from proxy.routes.subscriptions import Subscriptions
from proxy.settings import ProxySettings
from vocabulary.control.actor_apis import ReplicaHandle
from vocabulary.control.longpoll import ReplicaInfo, ReplicaSet, RouteEntry, RouteTable
from vocabulary.request_path.wire import WireRequest, WireResponse
from vocabulary.spec.endpoints import EndpointConfig


class Replica:
    """A fake replica: answers its name, or hangs forever when `hung`."""

    def __init__(self, name: str, hung: bool = False) -> None:
        self.name = name
        self.hung = hung
        self.seen = 0
        self.cancelled = 0


class Caller:
    async def call(
        self, handle: ReplicaHandle, request: WireRequest, timeout_s: float, batching: Batching | None = None
    ) -> WireResponse:
        replica: Replica = handle.actor  # type: ignore[attr-defined]
        replica.seen += 1
        if replica.hung:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                replica.cancelled += 1
                raise
        return 200, [], replica.name.encode()


class Stalls(NullRecorder):
    def __init__(self) -> None:
        self.stalled: list[str] = []
        self.codes: list[int] = []

    def replica_stalled(self, backend: str) -> None:
        self.stalled.append(backend)

    def request_done(self, endpoint: str, backend: str, code: int, duration_s: float) -> None:
        self.codes.append(code)


class Proxy:
    def __init__(self) -> None:
        settings = ProxySettings()
        rng = random.Random(0)
        self.recorder = Stalls()
        self.app = ProxyApp(Caller(), settings, rng, self.recorder)  # type: ignore[arg-type]
        self.subscriptions = Subscriptions(settings, rng)
        self._next = 0

    def publish(self, **updates: Any) -> None:
        answer = {}
        for key, payload in updates.items():
            self._next += 1
            answer[key.replace("__", ":")] = (self._next, payload)
        self.app.install(self.subscriptions.apply(answer))

    def replicas(self, *replicas: Replica) -> None:
        self.publish(replicas__v1=ReplicaSet(
            backend="v1", max_concurrent_queries=100,
            replicas=tuple(ReplicaInfo(replica_id=r.name, actor_name=r.name, handle=r) for r in replicas),
        ))


def test_a_hung_replica_leaves_routing_its_gets_are_retried_and_the_controller_is_told() -> None:
    async def scenario() -> None:
        proxy = Proxy()
        hung, fine = Replica("r-hung", hung=True), Replica("r-ok")
        config = EndpointConfig(name="e", route="/e", methods=("GET", "POST"), traffic={"v1": 1.0}, timeout_s=1.0)
        table = RouteTable(entries=(RouteEntry(route="/e", methods=("GET", "POST"), endpoint="e"),))
        proxy.publish(routes=table, endpoint__e=config)
        proxy.replicas(hung)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=proxy.app), base_url="http://p") as client:
            first = [asyncio.ensure_future(client.post("/e", content=b"x")) for _ in range(2)]
            await asyncio.sleep(0.3)
            held_get = asyncio.ensure_future(client.get("/e"))
            held_post = asyncio.ensure_future(client.post("/e", content=b"y"))
            await asyncio.sleep(0.1)
            assert hung.seen == 4
            proxy.replicas(hung, fine)  # a second replica arrives; the hung one is still listed
            assert [r.status_code for r in await asyncio.gather(*first)] == [504, 504]
            # The two timed-out calls made the stall; the others it held did not wait for their deadline.
            got, posted = await asyncio.wait_for(asyncio.gather(held_get, held_post), timeout=0.2)
            assert (got.status_code, got.content) == (200, b"r-ok")  # retried on another replica
            assert posted.status_code == 504 and b"stalled" in posted.content
            assert hung.cancelled == 4 and proxy.recorder.stalled == ["v1"]
            stalled = proxy.app.stalled_replicas()
            assert list(stalled) == ["v1"] and list(stalled["v1"]) == ["r-hung"]
            assert "2 calls ran out their timeout" in stalled["v1"]["r-hung"]

            # Out of routing at once: everything goes to the other replica.
            answers = await asyncio.gather(*(client.get("/e") for _ in range(20)))
            assert {(a.status_code, a.content) for a in answers} == {(200, b"r-ok")}
            assert hung.seen == 4

            # Still listed by the controller (a stale snapshot): still out, still reported.
            proxy.replicas(hung, fine)
            assert (await client.get("/e")).content == b"r-ok" and "v1" in proxy.app.stalled_replicas()
            # Replaced: the controller no longer lists it, so it is no longer reported.
            replacement = Replica("r-new")
            proxy.replicas(fine, replacement)
            assert proxy.app.stalled_replicas() == {}
            assert {(await client.get("/e")).status_code for _ in range(10)} == {200}

    asyncio.run(scenario())


def test_one_slow_call_alone_does_not_make_a_stall() -> None:
    async def scenario() -> None:
        proxy = Proxy()
        slow = Replica("r-slow", hung=True)
        config = EndpointConfig(name="e", route="/e", methods=("GET",), traffic={"v1": 1.0}, timeout_s=0.2)
        table = RouteTable(entries=(RouteEntry(route="/e", methods=("GET",), endpoint="e"),))
        proxy.publish(routes=table, endpoint__e=config)
        proxy.replicas(slow)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=proxy.app), base_url="http://p") as client:
            assert (await client.get("/e")).status_code == 504
            assert proxy.app.stalled_replicas() == {} and proxy.recorder.stalled == []
            slow.hung = False
            assert (await client.get("/e")).status_code == 200  # an answer: the strike is forgotten
            slow.hung = True
            assert (await client.get("/e")).status_code == 504
            assert proxy.app.stalled_replicas() == {}
            assert (await client.get("/e")).status_code == 504  # the second strike in a row
            assert list(proxy.app.stalled_replicas()["v1"]) == ["r-slow"]
            # No other replica: the request waits for the controller's replacement, here until its own timeout.
            assert (await client.get("/e")).status_code == 504
            assert proxy.app.stalled_replicas()["v1"]  # still reported, for the controller to replace

    asyncio.run(scenario())


def test_calls_that_time_out_together_are_all_504_not_retried_past_their_deadline() -> None:
    async def scenario() -> None:
        proxy = Proxy()
        hung = Replica("r-hung", hung=True)
        config = EndpointConfig(name="e", route="/e", methods=("GET",), traffic={"v1": 1.0}, timeout_s=0.3)
        table = RouteTable(entries=(RouteEntry(route="/e", methods=("GET",), endpoint="e"),))
        proxy.publish(routes=table, endpoint__e=config)
        proxy.replicas(hung)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=proxy.app), base_url="http://p") as client:
            answers = await asyncio.gather(*(client.get("/e") for _ in range(8)))
            assert [a.status_code for a in answers] == [504] * 8
            assert list(proxy.app.stalled_replicas()["v1"]) == ["r-hung"]
            assert hung.cancelled == 8

    asyncio.run(scenario())


def test_a_request_finding_the_last_replica_stalled_is_served_by_its_replacement() -> None:
    """Both replicas found stalled (e.g. each held calls to a hung callee): requests wait for the
    controller's replacements instead of 503, and are served once one is published."""
    async def scenario() -> tuple[int, bytes]:
        proxy = Proxy()
        first, second = Replica("r-1", hung=True), Replica("r-2", hung=True)
        config = EndpointConfig(name="e", route="/e", methods=("POST",), traffic={"v1": 1.0}, timeout_s=0.2)
        table = RouteTable(entries=(RouteEntry(route="/e", methods=("POST",), endpoint="e"),))
        proxy.publish(routes=table, endpoint__e=config, replicas__v1=ReplicaSet(
            backend="v1", max_concurrent_queries=100,
            replicas=tuple(ReplicaInfo(replica_id=r.name, actor_name=r.name, handle=r) for r in (first, second))))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=proxy.app), base_url="http://p") as client:
            for _ in range(4):  # two strikes on each: both out of routing
                assert (await client.post("/e")).status_code == 504
            assert set(proxy.app.stalled_replicas()["v1"]) == {"r-1", "r-2"}
            config = EndpointConfig(name="e", route="/e", methods=("POST",), traffic={"v1": 1.0}, timeout_s=5)
            proxy.publish(endpoint__e=config)
            waiting = asyncio.ensure_future(client.post("/e"))
            await asyncio.sleep(0.1)
            assert not waiting.done()  # held, not 503
            proxy.replicas(Replica("r-3"))  # the controller's replacement is running
            answer = await asyncio.wait_for(waiting, 2)
        return answer.status_code, answer.content

    assert asyncio.run(scenario()) == (200, b"r-3")
