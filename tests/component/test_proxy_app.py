"""The proxy's ASGI app in-process (httpx ASGI transport) with fake replicas."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from proxy.observability.metrics import ShadowResult
from proxy.pool.calling import HandlerError, ReplicaDiedError
from proxy.settings import ProxySettings
from tests.support.proxy_app import FakeReplica, Handler, Proxy, get, replica_set, run
from vocabulary.control.longpoll import RouteEntry, RouteTable
from vocabulary.request_path.wire import WireRequest, WireResponse
from vocabulary.spec.endpoints import EndpointConfig


async def sleeping(seconds: float) -> Handler:
    async def handler(request: WireRequest) -> WireResponse:
        await asyncio.sleep(seconds)
        return 200, [], b"late"
    return handler


def blocked_until(event: asyncio.Event, body: bytes = b"done") -> Handler:
    async def handler(request: WireRequest) -> WireResponse:
        await event.wait()
        return 200, [], body
    return handler


async def raising(request: WireRequest) -> WireResponse:
    raise HandlerError("Traceback (most recent call last):\n  RuntimeError: secret detail")


async def dead(request: WireRequest) -> WireResponse:
    raise ReplicaDiedError("actor died")


# --- routing ------------------------------------------------------------------


def test_no_matching_route_is_404() -> None:
    proxy = Proxy()
    proxy.serve("e", "/e", {"v1": [FakeReplica("r1")]})
    assert run(get(proxy, "/other")).status_code == 404


def test_a_route_does_not_match_a_longer_segment() -> None:
    proxy = Proxy()
    proxy.serve("e", "/e", {"v1": [FakeReplica("r1")]})
    assert run(get(proxy, "/ee")).status_code == 404
    assert run(get(proxy, "/e/x")).status_code == 200


def test_a_disallowed_method_is_405_with_allow() -> None:
    proxy = Proxy()
    proxy.serve("e", "/e", {"v1": [FakeReplica("r1")]}, methods=("POST",))
    response = run(get(proxy, "/e"))
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"


def test_healthz_answers_200_once_the_route_table_arrived() -> None:
    proxy = Proxy()
    proxy.serve("e", "/e", {"v1": [FakeReplica("r1")]})
    assert run(get(proxy, "/-/healthz")).status_code == 200


def test_routes_lists_the_route_table_as_json() -> None:
    proxy = Proxy()
    proxy.serve("e", "/e", {"v1": [FakeReplica("r1")]})
    assert run(get(proxy, "/-/routes")).json() == {"/e": {"endpoint": "e", "methods": ["GET", "POST"]}}


# --- the request reaching the replica ------------------------------------------


def test_method_path_query_headers_and_binary_body_reach_the_replica_intact() -> None:
    replica = FakeReplica("r1")
    proxy = Proxy()
    proxy.serve("e", "/e", {"v1": [replica]})
    body = bytes(range(256)) * 4

    async def scenario() -> httpx.Response:
        async with proxy.client() as client:
            return await client.post("/e/sub?x=1&y=%20", content=body, headers={"x-custom": "yes"})

    assert run(scenario()).status_code == 200
    method, path, query, headers, sent = replica.seen[0]
    assert (method, path, query, sent) == ("POST", "/e/sub", b"x=1&y=%20", body)
    assert (b"x-custom", b"yes") in headers


def test_the_replicas_answer_is_returned_as_is() -> None:
    async def teapot(request: WireRequest) -> WireResponse:
        return 418, [(b"x-kind", b"tea")], b"\x00\xff"

    proxy = Proxy()
    proxy.serve("e", "/e", {"v1": [FakeReplica("r1", teapot)]})
    response = run(get(proxy, "/e"))
    assert (response.status_code, response.headers["x-kind"], response.content) == (418, "tea", b"\x00\xff")


def test_a_body_over_the_limit_is_413_and_never_reaches_a_replica() -> None:
    replica = FakeReplica("r1")
    proxy = Proxy(ProxySettings(max_body_bytes=1000))
    proxy.serve("e", "/e", {"v1": [replica]})

    async def scenario() -> httpx.Response:
        async with proxy.client() as client:
            return await client.post("/e", content=b"x" * 1001)

    assert run(scenario()).status_code == 413
    assert replica.seen == []


def test_each_endpoint_takes_bodies_up_to_its_own_limit_under_the_proxys_ceiling() -> None:
    replica = FakeReplica("r1")
    proxy = Proxy(ProxySettings(max_body_bytes=3000))
    limits = {"small": 1000, "large": 2000, "huge": 5000}
    proxy.publish(
        routes=RouteTable(entries=tuple(RouteEntry(route=f"/{name}", methods=("POST",), endpoint=name) for name in limits)),
        **{f"endpoint__{name}": EndpointConfig(name=name, route=f"/{name}", methods=("POST",), traffic={"v1": 1.0},
                                               max_body_bytes=limit) for name, limit in limits.items()},
    )
    proxy.publish(replicas__v1=replica_set("v1", [replica]))

    async def statuses() -> list[tuple[str, int, int]]:
        async with proxy.client() as client:
            sizes = [("/small", 1000), ("/small", 1001), ("/large", 2000), ("/large", 2001),
                     ("/huge", 3000), ("/huge", 3001)]
            return [(path, size, (await client.post(path, content=b"x" * size)).status_code) for path, size in sizes]

    assert run(statuses()) == [
        ("/small", 1000, 200), ("/small", 1001, 413), ("/large", 2000, 200), ("/large", 2001, 413),
        ("/huge", 3000, 200), ("/huge", 3001, 413),
    ]
    assert [len(request[4]) for request in replica.seen] == [1000, 2000, 3000]


def test_a_body_in_many_messages_reaches_the_replica_whole_with_or_without_a_content_length() -> None:
    replica = FakeReplica("r1")
    proxy = Proxy(ProxySettings(max_body_bytes=100_000))
    proxy.serve("e", "/e", {"v1": [replica]})
    parts = [bytes([n]) * 7_000 for n in range(10)]

    async def pieces(parts: list[bytes] = parts) -> Any:
        for part in parts:
            yield part

    async def scenario() -> list[int]:
        async with proxy.client() as client:
            sized = await client.post("/e", content=pieces(), headers={"content-length": "70000"})
            chunked = await client.post("/e", content=pieces())  # no length: the buffer grows as it comes
            over = await client.post("/e", content=pieces([b"y" * 60_000] * 2), headers={"content-length": "99000"})
        return [sized.status_code, chunked.status_code, over.status_code]

    assert run(scenario()) == [200, 200, 413]
    assert [request[4] for request in replica.seen] == [b"".join(parts), b"".join(parts)]


def test_a_body_whose_content_length_is_over_the_limit_is_413_before_any_of_it_is_read() -> None:
    replica = FakeReplica("r1")
    proxy = Proxy(ProxySettings(max_body_bytes=1000))
    proxy.serve("e", "/e", {"v1": [replica]})
    sent: list[dict[str, Any]] = []
    asked = 0

    async def receive() -> dict[str, Any]:
        nonlocal asked
        asked += 1
        return {"type": "http.request", "body": b"x" * 1001, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/e", "raw_path": b"/e", "query_string": b"",
             "headers": [(b"content-length", b"1001")], "http_version": "1.1"}
    run(proxy.app(scope, receive, send))
    assert (sent[0]["status"], asked, replica.seen) == (413, 0, [])


def test_bodies_past_the_workers_budget_are_503_until_the_requests_holding_it_end() -> None:
    release = asyncio.Event()

    async def held(request: WireRequest) -> WireResponse:
        await release.wait()
        return 200, [], b"done"

    replica = FakeReplica("r1", held)
    proxy = Proxy(ProxySettings(max_body_bytes=1000, max_bodies_in_flight_bytes=1500))
    proxy.serve("e", "/e", {"v1": [replica]})

    async def scenario() -> list[tuple[int, str | None]]:
        async with proxy.client() as client:
            first = asyncio.ensure_future(client.post("/e", content=b"a" * 1000))
            while not replica.seen:
                await asyncio.sleep(0.01)
            refused = await client.post("/e", content=b"b" * 1000)  # 1,000 held + 1,000 > 1,500
            release.set()
            answers = [await first, refused, await client.post("/e", content=b"c" * 1000)]
        return [(r.status_code, r.headers.get("retry-after")) for r in answers]

    assert run(scenario()) == [(200, None), (503, "1"), (200, None)]
    assert [len(request[4]) for request in replica.seen] == [1000, 1000]


# --- failures ------------------------------------------------------------------


def test_a_backend_without_replicas_is_503_with_retry_after() -> None:
    proxy = Proxy()
    proxy.serve("e", "/e", {"v1": []})
    response = run(get(proxy, "/e"))
    assert response.status_code == 503
    assert "retry-after" in response.headers


def test_a_handler_exception_is_500_without_the_traceback() -> None:
    proxy = Proxy()
    proxy.serve("e", "/e", {"v1": [FakeReplica("r1", raising)]})
    response = run(get(proxy, "/e"))
    assert response.status_code == 500
    assert "secret" not in response.text and "Traceback" not in response.text


def test_a_slow_handler_is_504_and_its_call_is_cancelled() -> None:
    async def scenario() -> tuple[int, int]:
        replica = FakeReplica("r1", await sleeping(10))
        proxy = Proxy()
        proxy.serve("e", "/e", {"v1": [replica]}, timeout_s=0.1)
        response = await get(proxy, "/e")
        return response.status_code, replica.cancelled

    assert run(scenario()) == (504, 1)


def test_a_get_whose_replica_died_is_retried_on_another_replica() -> None:
    proxy = Proxy()
    proxy.serve("e", "/e", {"v1": [FakeReplica("dead", dead), FakeReplica("alive")]})

    async def scenario() -> list[httpx.Response]:
        return [await get(proxy, "/e") for _ in range(10)]

    responses = run(scenario())
    assert {r.status_code for r in responses} == {200}
    assert {r.text for r in responses} == {"alive"}


def test_a_dead_replica_is_dropped_before_the_controller_notices() -> None:
    dead_replica = FakeReplica("dead", dead)
    proxy = Proxy()
    proxy.serve("e", "/e", {"v1": [dead_replica, FakeReplica("alive")]})

    async def scenario() -> None:
        for _ in range(20):
            await get(proxy, "/e")

    run(scenario())
    assert len(dead_replica.seen) == 1


def test_a_post_whose_replica_died_is_not_retried_and_answers_502() -> None:
    alive = FakeReplica("alive")
    proxy = Proxy()
    proxy.serve("e", "/e", {"v1": [FakeReplica("dead", dead), alive]}, cap=1)

    async def scenario() -> list[int]:
        codes = []
        async with proxy.client() as client:
            for _ in range(10):
                codes.append((await client.post("/e", content=b"x")).status_code)
        return codes

    codes = run(scenario())
    assert codes.count(502) == 1 and codes.count(200) == 9


# --- backpressure ----------------------------------------------------------------


def test_requests_beyond_the_replica_cap_wait_and_then_succeed() -> None:
    async def scenario() -> list[int]:
        release = asyncio.Event()
        proxy = Proxy()
        proxy.serve("e", "/e", {"v1": [FakeReplica("r1", blocked_until(release))]}, cap=1)
        async with proxy.client() as client:
            pending = [asyncio.ensure_future(client.get("/e")) for _ in range(3)]
            await asyncio.sleep(0.05)
            assert proxy.app.backend_load() == {"v1": {"ongoing": 1, "queued": 2, "unserved": 0}}
            release.set()
            return [(await p).status_code for p in pending]

    assert run(scenario()) == [200, 200, 200]


def test_a_full_queue_answers_503_with_retry_after() -> None:
    async def scenario() -> list[int]:
        release = asyncio.Event()
        proxy = Proxy(ProxySettings(max_queued_per_backend=1))
        proxy.serve("e", "/e", {"v1": [FakeReplica("r1", blocked_until(release))]}, cap=1)
        async with proxy.client() as client:
            pending = [asyncio.ensure_future(client.get("/e")) for _ in range(2)]
            await asyncio.sleep(0.05)
            rejected = await client.get("/e")
            assert rejected.headers["retry-after"] == "1"
            release.set()
            return [rejected.status_code] + [(await p).status_code for p in pending]

    assert run(scenario()) == [503, 200, 200]


# --- shadow traffic ------------------------------------------------------------------


def test_shadow_copies_reach_the_shadow_backend_and_its_reply_is_dropped() -> None:
    shadow = FakeReplica("shadow")
    proxy = Proxy()
    proxy.serve("e", "/e", {"v1": [FakeReplica("primary")], "v3": [shadow]}, traffic={"v1": 1.0}, shadow={"v3": 1.0})

    async def scenario() -> str:
        text = (await get(proxy, "/e")).text
        await asyncio.sleep(0.01)
        return text

    assert run(scenario()) == "primary"
    assert len(shadow.seen) == 1
    assert proxy.recorded.shadows == [("e", "v3", ShadowResult.OK)]


def test_a_failing_shadow_does_not_change_the_primary_answer() -> None:
    proxy = Proxy()
    proxy.serve("e", "/e", {"v1": [FakeReplica("primary")], "v3": [FakeReplica("s", raising)]},
                traffic={"v1": 1.0}, shadow={"v3": 1.0})

    async def scenario() -> httpx.Response:
        response = await get(proxy, "/e")
        await asyncio.sleep(0.01)
        return response

    response = run(scenario())
    assert (response.status_code, response.text) == (200, "primary")
    assert proxy.recorded.shadows == [("e", "v3", ShadowResult.ERROR)]


def test_a_slow_shadow_does_not_delay_the_primary() -> None:
    async def scenario() -> float:
        proxy = Proxy()
        proxy.serve("e", "/e", {"v1": [FakeReplica("primary")], "v3": [FakeReplica("s", await sleeping(5))]},
                    traffic={"v1": 1.0}, shadow={"v3": 1.0})
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert (await get(proxy, "/e")).text == "primary"
        elapsed = loop.time() - started
        await proxy.app.stop_shadows()
        return elapsed

    assert run(scenario()) < 1.0


def test_a_shadow_copy_past_the_endpoint_timeout_is_counted_as_a_timeout() -> None:
    async def scenario() -> None:
        proxy = Proxy()
        proxy.serve("e", "/e", {"v1": [FakeReplica("primary")], "v3": [FakeReplica("s", await sleeping(5))]},
                    traffic={"v1": 1.0}, shadow={"v3": 1.0}, timeout_s=0.05)
        assert (await get(proxy, "/e")).text == "primary"
        await asyncio.sleep(0.2)
        assert proxy.recorded.shadows == [("e", "v3", ShadowResult.TIMEOUT)]

    run(scenario())


def test_shadow_copies_to_a_saturated_backend_are_dropped_and_counted() -> None:
    async def scenario() -> list[str]:
        never = asyncio.Event()
        shadow = FakeReplica("s", blocked_until(never))
        proxy = Proxy()
        proxy.serve("e", "/e", {"v1": [FakeReplica("primary")]}, traffic={"v1": 1.0})
        proxy.publish(**{"endpoint__e": EndpointConfig(name="e", route="/e", traffic={"v1": 1.0}, shadow={"v3": 1.0})})
        proxy.publish(replicas__v3=replica_set("v3", [shadow], cap=1))
        codes = [(await get(proxy, "/e")).status_code for _ in range(3)]
        assert codes == [200, 200, 200]
        await asyncio.sleep(0.01)
        results = [result for _, _, result in proxy.recorded.shadows]
        assert len(shadow.seen) == 1
        await proxy.app.stop_shadows()
        return results

    assert run(scenario()) == [ShadowResult.DROPPED, ShadowResult.DROPPED]


# --- config switches ------------------------------------------------------------------


def test_an_in_flight_request_finishes_on_its_replica_after_a_traffic_switch() -> None:
    async def scenario() -> tuple[str, str]:
        release = asyncio.Event()
        proxy = Proxy()
        proxy.serve("e", "/e", {"v1": [FakeReplica("old", blocked_until(release, b"old"))]})
        async with proxy.client() as client:
            in_flight = asyncio.ensure_future(client.get("/e"))
            await asyncio.sleep(0.02)
            proxy.publish(endpoint__e=EndpointConfig(name="e", route="/e", traffic={"v2": 1.0}))
            proxy.publish(replicas__v2=replica_set("v2", [FakeReplica("new")]))
            after = await client.get("/e")
            release.set()
            return (await in_flight).text, after.text

    assert run(scenario()) == ("old", "new")


def test_every_finished_request_is_recorded_with_endpoint_backend_and_code() -> None:
    proxy = Proxy()
    proxy.serve("e", "/e", {"v1": [FakeReplica("r1")]})
    run(get(proxy, "/e"))
    assert proxy.recorded.requests == [("e", "v1", 200)]
