"""Hostile requests at the proxy's ASGI app (issue 11 rows 6, 8, 9 and 15), in-process.

Each case asserts the precise answer and that no replica saw the request
(or, for shadows and hop-by-hop headers, exactly what it saw).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from httpedge.limits import EdgeLimits
from proxy.settings import ProxySettings
from tests.support.delivery import answering, get_all, settle
from tests.support.delivery import proxy as delivery_proxy
from tests.support.proxy_app import FakeReplica, Proxy, run
from vocabulary.request_path.wire import WireRequest, WireResponse
from vocabulary.spec.endpoints import EndpointConfig


def served(settings: ProxySettings = ProxySettings()) -> tuple[Proxy, FakeReplica]:
    replica = FakeReplica("r1")
    proxy = Proxy(settings)
    proxy.serve("api", "/api", {"v1": [replica]})
    return proxy, replica


class Client:
    """Plays uvicorn's side of ASGI: hands over `messages`, then waits (a silent client)."""

    def __init__(self, messages: list[dict[str, Any]]) -> None:
        self.messages = list(messages)
        self.sent: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        if self.messages:
            return self.messages.pop(0)
        await asyncio.Event().wait()  # a client that never sends the rest
        raise AssertionError("unreachable")

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def status(self) -> int | None:
        return next((m["status"] for m in self.sent if m["type"] == "http.response.start"), None)


def post(proxy: Proxy, client: Client, path: bytes = b"/api") -> None:
    scope = {"type": "http", "method": "POST", "path": path.decode(), "raw_path": path, "query_string": b"",
             "headers": [(b"host", b"proxy"), (b"content-length", b"100")]}
    run(proxy.app(scope, client.receive, client.send))


@pytest.mark.parametrize("raw", [
    b"/api/%2e%2e/admin", b"/api/%2E%2E/admin", b"/api/../admin", b"/api/./x", b"/api/.%2e/admin",
    b"/api%2fadmin", b"/api/a%2Fb", b"/api/a%5cb",
])
def test_dot_segments_and_encoded_slashes_are_400_and_reach_no_replica(raw: bytes) -> None:
    proxy, replica = served()
    client = Client([{"type": "http.request", "body": b"", "more_body": False}])
    post(proxy, client, raw)
    assert client.status() == 400 and replica.seen == []


def test_empty_segments_collapse_before_routing() -> None:
    proxy, replica = served()
    client = Client([{"type": "http.request", "body": b"", "more_body": False}])
    post(proxy, client, b"//api//v1/")
    assert client.status() == 200 and replica.seen[0][1] == "/api/v1/"


def test_a_client_that_leaves_mid_body_gets_no_replica_call_and_is_recorded_as_499() -> None:
    proxy, replica = served()
    client = Client([{"type": "http.request", "body": b"half of it", "more_body": True}, {"type": "http.disconnect"}])
    post(proxy, client)
    assert replica.seen == [] and client.sent == []
    assert proxy.recorded.requests == [("api", "v1", 499)]


def test_a_client_that_leaves_before_any_body_gets_no_replica_call() -> None:
    proxy, replica = served()
    client = Client([{"type": "http.disconnect"}])
    post(proxy, client)
    assert replica.seen == [] and proxy.recorded.requests == [("api", "v1", 499)]


def test_a_body_slower_than_the_deadline_is_408_and_reaches_no_replica() -> None:
    proxy, replica = served(ProxySettings(edge=EdgeLimits(body_timeout_s=0.2)))
    client = Client([{"type": "http.request", "body": b"a trickle", "more_body": True}])
    post(proxy, client)
    assert client.status() == 408 and replica.seen == []
    start = client.sent[0]
    assert (b"connection", b"close") in start["headers"]


HOP_BY_HOP = {
    "Connection": "keep-alive, X-Secret-Hop", "Keep-Alive": "timeout=5", "Proxy-Authorization": "Basic eA==",
    "TE": "trailers", "Trailer": "X-T", "Upgrade": "h2c", "X-Secret-Hop": "1", "X-Kept": "yes",
}


def test_hop_by_hop_request_headers_never_reach_the_replica() -> None:
    proxy, replica = served()

    async def scenario() -> int:
        async with proxy.client() as client:
            return (await client.get("/api", headers=HOP_BY_HOP)).status_code

    assert run(scenario()) == 200
    names = {name.decode() for name, _ in replica.seen[0][3]}
    assert "x-kept" in names
    assert names.isdisjoint({"connection", "keep-alive", "proxy-authorization", "te", "trailer", "upgrade",
                             "x-secret-hop", "transfer-encoding"})


def test_hop_by_hop_response_headers_never_reach_the_client() -> None:
    async def hoppy(request: WireRequest) -> WireResponse:
        return 200, [(b"connection", b"x-internal"), (b"x-internal", b"1"), (b"keep-alive", b"timeout=99"),
                     (b"proxy-authenticate", b"Basic"), (b"upgrade", b"h2c"), (b"x-kept", b"yes")], b"ok"

    proxy = Proxy()
    proxy.serve("api", "/api", {"v1": [FakeReplica("r1", hoppy)]})

    async def scenario() -> Any:
        async with proxy.client() as client:
            return (await client.get("/api")).headers

    headers = run(scenario())
    assert headers["x-kept"] == "yes"
    assert not {"x-internal", "keep-alive", "proxy-authenticate", "upgrade"} & set(headers)


CREDENTIALS = {
    "Authorization": "Bearer user-secret", "Proxy-Authorization": "Basic eA==", "Cookie": "session=abc",
    "X-Api-Key": "k1", "X-Auth-Token": "t1", "X-Csrf-Token": "t2", "X-Client-Secret": "s1", "Api-Key": "k2",
    "X-Apikey": "k3", "X-Session-Id": "s2", "X-Password": "p",
    # Issue 50 row 12: by pattern, not by listed fragments (`_` read as `-`).
    "x-api_key": "k4", "x-access-key": "k5", "x-auth": "a1", "X-Refresh_Token": "t3", "X-Db-Passwd": "p2",
    "X-Aws-Credentials": "c1", "X-Upstream-Cookie": "c2",
}


def shadowed(path: str, headers: dict[str, str], **endpoint: Any) -> tuple[FakeReplica, FakeReplica]:
    """One request to an endpoint shadowing every request; the primary and the shadow, with what they saw."""
    primary, shadow = FakeReplica("primary"), FakeReplica("shadow")
    proxy = Proxy()
    proxy.serve("api", "/api", {"v1": [primary], "v2": [shadow]}, traffic={"v1": 1.0}, shadow={"v2": 1.0})
    if endpoint:  # the endpoint's other keys, as `serve` set it
        proxy.publish(endpoint__api=EndpointConfig(name="api", route="/api", traffic={"v1": 1.0}, shadow={"v2": 1.0},
                                                   **endpoint))

    async def scenario() -> None:
        async with proxy.client() as client:
            await client.get(path, headers=headers)
        for _ in range(1000):  # the copy runs on later turns of the loop
            if proxy.recorded.shadows:
                return
            await asyncio.sleep(0)

    run(scenario())
    return primary, shadow


def test_shadow_copies_carry_no_credential_looking_header() -> None:
    primary, shadow = shadowed("/api", {**CREDENTIALS, "X-Kept": "yes", "X-Request-Id": "r1"})
    primary_names = {name for name, _ in primary.seen[0][3]}
    shadow_names = {name for name, _ in shadow.seen[0][3]}
    credentials = {name.lower().encode() for name in CREDENTIALS} - {b"proxy-authorization"}  # hop-by-hop
    assert credentials | {b"x-kept"} <= primary_names
    assert {b"x-kept", b"x-request-id"} <= shadow_names and not credentials & shadow_names
    assert b"proxy-authorization" not in shadow_names


def test_shadow_copies_lose_the_query_string_unless_the_endpoint_keeps_it() -> None:
    primary, shadow = shadowed("/api/x?token=user-secret&q=1", {})
    assert primary.seen[0][2] == b"token=user-secret&q=1"
    assert shadow.seen[0][1] == "/api/x" and shadow.seen[0][2] == b""
    _, kept = shadowed("/api/x?q=1", {}, shadow_query=True)
    assert kept.seen[0][2] == b"q=1"


def test_the_shadow_mismatch_sample_is_not_served_on_the_public_port() -> None:
    # Issue 27 row 3: it showed other users' requests to anyone; the agent asks proxies over Ray instead.
    app, _ = delivery_proxy({"v1": FakeReplica("v1", answering({"iban": "DE89"})),
                             "v2": FakeReplica("v2", answering({"iban": "DE02"}))},
                            traffic={"v1": 1.0}, shadow={"v2": 1.0}, shadow_compare="json")

    async def scenario() -> int:
        await get_all(app, [{}])
        await settle(app)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
            return (await client.get("/-/shadow/mismatches")).status_code

    assert asyncio.run(scenario()) == 404
    [sample] = app.mismatches.recent()  # kept, for the agent's Ray call
    assert sample.diff == "$.iban: string values differ"
