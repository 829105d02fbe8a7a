"""Hostile HTTP at every listener: the proxy's, the admin API's and the webhook's (issue 27 rows 1 and 2).

Each case runs against the three listeners alike, over real sockets on
loopback: the proxy's app behind the server the proxy actor runs, the admin
app and the webhook app behind `gitops.admin.api.server`. All three are one HTTP
edge (`httpedge.server`), so each bound holds for the whole life of every
connection: trailers never reach an app and count against the header limit;
after an answer given while the body still arrives, the connection ends.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Iterator

import pytest

from gitops.admin.api import WebhookGuard, build_app, build_webhook_app
from httpedge.answers import LINGER_S
from httpedge.asgi import App, Receive, Scope, Send
from httpedge.limits import EdgeLimits
from proxy.settings import ProxySettings
from tests.support.admin import SECRET, FakeAgent
from tests.support.listeners import RawClient, serving, serving_proxy
from tests.support.proxy_app import FakeReplica, Proxy

pytestmark = pytest.mark.real

KINDS = ["proxy", "admin", "webhook"]
MIB = 1024 * 1024
# Bodies may take their time here: what ends a connection below is the edge's bound, not the app's deadline.
PATIENT = EdgeLimits(body_timeout_s=5.0, max_connections=16)


@dataclass
class Target:
    port: int
    reads: str  # a path whose app reads the whole body before it answers
    seen: list[list[tuple[bytes, bytes]]] = field(default_factory=list)  # each request's headers as its app left them
    replica: FakeReplica | None = None


def recording(app: App, seen: list[list[tuple[bytes, bytes]]]) -> App:
    """`app`, noting the scope's header list once the app is done with the request."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        await app(scope, receive, send)
        if scope["type"] == "http":
            seen.append(list(scope["headers"]))

    return wrapped


@contextlib.contextmanager
def listener(kind: str, limits: EdgeLimits) -> Iterator[Target]:
    guard = WebhookGuard(SECRET, body_timeout_s=limits.body_timeout_s)
    if kind == "proxy":
        proxy, replica = Proxy(ProxySettings(edge=limits)), FakeReplica("r1")
        proxy.serve("api", "/api", {"v1": [replica]})
        target = Target(0, "/api", replica=replica)
        with serving_proxy(recording(proxy.app, target.seen), limits) as target.port:
            yield target
    else:
        if kind == "admin":
            app = build_app(FakeAgent(), sync=lambda: None, webhook_fetch=lambda: None,
                            metrics=lambda: (b"", "text/plain"), webhook=guard)
        else:
            app = build_webhook_app(guard, lambda: None)
        target = Target(0, "/hooks/git")
        with serving(recording(app, target.seen), limits) as target.port:
            yield target


def chunked_post(path: str) -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n".encode()


def eventually_seen(target: Target) -> list[tuple[bytes, bytes]]:
    deadline = time.monotonic() + 5
    while not target.seen and time.monotonic() < deadline:
        time.sleep(0.01)  # the app notes its scope just after its answer went out
    return target.seen[0]


# --- row 1: trailers ----------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_trailers_never_reach_the_app_s_headers(kind: str) -> None:
    with listener(kind, PATIENT) as target:
        client = RawClient(target.port)
        client.send(chunked_post(target.reads) + b"5\r\nhello\r\n0\r\nX-Sneaky: trailer\r\nAuthorization: x\r\n\r\n")
        status, _ = client.answer()
        assert status == (200 if kind == "proxy" else 401)  # served (the webhook: read, then no signature)
        names = {name for name, _ in eventually_seen(target)}
        client.close()
    assert b"transfer-encoding" in names and not {b"x-sneaky", b"authorization"} & names
    if target.replica is not None:
        assert not {b"x-sneaky", b"authorization"} & {name for name, _ in target.replica.seen[0][3]}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("flood", ["many lines", "one endless line"])
def test_a_trailer_flood_is_431_long_before_it_is_all_sent(kind: str, flood: str) -> None:
    block = b"X-Flood: " + b"a" * 1000 + b"\r\n" if flood == "many lines" else b"a" * 1024
    with listener(kind, PATIENT) as target:
        client = RawClient(target.port)
        client.send(chunked_post(target.reads) + b"1\r\na\r\n0\r\n" + (b"" if flood == "many lines" else b"X-Flood: "))
        sent = 0
        while sent < 64 * MIB and client.send(block * 64):
            sent += len(block) * 64
        status, headers = client.answer()
        client.close()
    assert status == 431 and headers["connection"] == "close"
    assert sent < 8 * MIB  # refused at about the header limit, not read to the end
    assert target.seen == [] or all(b"x-flood" not in dict(seen) for seen in target.seen)


# --- row 2: an early answer ends the connection -------------------------------------


def keeps_dripping_until_closed(client: RawClient, within_s: float) -> bool:
    """Sends a body byte every 0.2 s (a slow client's attack) until the server has closed the connection
    for good: not only shut its side (the end of its answer), but refused what the client sends."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            client.sock.send(b"x")
        except OSError:
            return True
        client.closed_within(0.2)  # reads (and drops) what the server still sends
    return False


EARLY = b"POST /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n" + b"x" * 10


@pytest.mark.parametrize("kind", KINDS)
def test_after_an_early_answer_a_dripped_body_cannot_hold_the_connection(kind: str) -> None:
    with listener(kind, PATIENT) as target:
        client = RawClient(target.port)
        client.send(EARLY)
        status, headers = client.answer()
        assert status == 404 and headers["connection"] == "close"
        assert keeps_dripping_until_closed(client, LINGER_S + 2)
        client.close()


@pytest.mark.parametrize("kind", KINDS)
def test_dripped_bodies_after_early_answers_do_not_fill_the_listener(kind: str) -> None:
    limits = EdgeLimits(body_timeout_s=5.0, max_connections=3)
    with listener(kind, limits) as target:
        drippers = [RawClient(target.port) for _ in range(limits.max_connections)]
        for dripper in drippers:
            dripper.send(EARLY)
            assert dripper.answer()[0] == 404
        for dripper in drippers:
            assert keeps_dripping_until_closed(dripper, LINGER_S + 2)
        late = RawClient(target.port)
        late.send(b"GET /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert late.answer()[0] == 404  # served, not 503: the drippers no longer hold the listener
        for client in [*drippers, late]:
            client.close()


@pytest.mark.parametrize("kind", KINDS)
def test_an_answer_after_the_whole_body_keeps_the_connection(kind: str) -> None:
    with listener(kind, PATIENT) as target:
        client = RawClient(target.port)
        for _ in range(2):
            client.send(b"POST /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 3\r\n\r\nabc")
            status, headers = client.answer()
            assert status == 404 and headers.get("connection") != "close"  # (its body came with its head)
        client.close()
