"""Slow, oversized and excess clients at the agent's real admin listener (issue 11 row 9).

Real sockets on loopback against `gitops.admin.api.server`, the same HTTP
edge (`httpedge.server`) the proxy uses. Each case
asserts the precise answer, that it came within the bound, and that the
agent was not touched.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from gitops.admin.api import WebhookGuard, build_app
from gitops.admin.webhooks import sign
from httpedge.limits import EdgeLimits
from tests.support.admin import SECRET, FakeAgent
from tests.support.listeners import RawClient, serving

pytestmark = pytest.mark.real

FAST = EdgeLimits(header_timeout_s=0.5, body_timeout_s=0.5, max_connections=3)
SUSPEND = b"POST /suspend HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n"


class Admin:
    def __init__(self) -> None:
        self.agent = FakeAgent()
        self.fetches = 0


@pytest.fixture
def admin() -> Iterator[tuple[Admin, int]]:
    target = Admin()

    def fetch() -> None:
        target.agent.fetches += 1

    app = build_app(target.agent, sync=lambda: None, webhook_fetch=fetch, metrics=lambda: (b"", "text/plain"),
                    webhook=WebhookGuard(SECRET, body_timeout_s=FAST.body_timeout_s))
    with serving(app, FAST) as port:
        yield target, port


def test_a_header_above_64_kib_is_431_and_suspends_nothing() -> None:
    agent = FakeAgent()
    app = build_app(agent, sync=lambda: None, webhook_fetch=lambda: None, metrics=lambda: (b"", "text/plain"))
    with serving(app) as port:  # the default limits: 64 KiB
        client = RawClient(port)
        client.send(SUSPEND + b"X-Big: " + b"a" * (65 * 1024) + b"\r\n\r\n")
        assert client.answer()[0] == 431
        client.close()
    assert not agent.suspended


def test_a_64_mib_header_is_cut_off_at_the_limit_not_buffered(admin: tuple[Admin, int]) -> None:
    target, port = admin
    client = RawClient(port)
    sent = 0
    client.send(SUSPEND + b"X-Big: ")
    while sent < 64 * 1024 * 1024 and client.send(b"a" * 65536):
        sent += 65536
    assert client.answer()[0] == 431
    assert sent < 8 * 1024 * 1024  # refused long before the whole header arrived
    assert not target.agent.suspended


def test_an_idle_connection_is_408_at_the_header_deadline(admin: tuple[Admin, int]) -> None:
    client = RawClient(admin[1])
    assert client.answer()[0] == 408
    assert client.elapsed() < FAST.header_timeout_s + 2


def test_a_header_dripped_a_byte_at_a_time_is_408_and_suspends_nothing(admin: tuple[Admin, int]) -> None:
    target, port = admin
    client = RawClient(port)
    client.drip(SUSPEND + b"X-Slow: " + b"a" * 100 + b"\r\n\r\n", every_s=0.05, until_s=5)
    assert client.answer()[0] == 408
    assert client.elapsed() < FAST.header_timeout_s + 2
    assert not target.agent.suspended


def test_a_webhook_body_dripped_past_the_deadline_is_408_and_fetches_nothing(admin: tuple[Admin, int]) -> None:
    target, port = admin
    body = b'{"after": "abc"}' * 10
    client = RawClient(port)
    client.send(b"POST /hooks/git HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Hub-Signature-256: " + sign(SECRET, body).encode()
                + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n")
    client.drip(body, every_s=0.05, until_s=3)
    assert client.answer()[0] == 408
    assert client.elapsed() < FAST.body_timeout_s + 2
    assert target.agent.fetches == 0


def test_connections_past_the_cap_are_503_with_retry_after(admin: tuple[Admin, int]) -> None:
    target, port = admin
    holders = [RawClient(port) for _ in range(FAST.max_connections)]
    for holder in holders:
        holder.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert holder.answer()[0] == 200  # served, and kept open (keep-alive)
    extra = RawClient(port)
    extra.send(SUSPEND + b"\r\n")
    status, headers = extra.answer()
    assert status == 503 and headers["retry-after"] == "1"
    assert not target.agent.suspended
    for client in [*holders, extra]:
        client.close()
