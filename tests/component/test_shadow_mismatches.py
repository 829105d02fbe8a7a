"""The agent's `GET /shadow/mismatches`: every proxy's sample merged newest first, behind the admin token.

The proxies are real HTTP servers on loopback answering `/-/shadow/mismatches`
as the proxy does; which ones are asked comes from an observed cluster status
naming their addresses, as the controller reports one proxy per node; the
admin app runs in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import threading
from typing import Any, Callable, Iterator

import httpx
import pytest

from gitops.access import AccessPolicy
from gitops.admin import build_app
from gitops.shadow_mismatches import collector, merge, proxy_url, proxy_urls
from tests.component.test_admin import FakeAgent
from tests.real.support import free_port
from vocabulary.status import ClusterStatus, ProxyState, ProxyStatus

TOKEN = b"admin-token"


def mismatch(at: float, path: str) -> dict[str, Any]:
    return {"at": at, "endpoint": "echo", "backend": "v3", "path": path, "primary_status": 200,
            "shadow_status": 500, "diff": "status 200 vs 500"}


@contextlib.contextmanager
def proxy(sample: list[dict[str, Any]]) -> Iterator[str]:
    body = json.dumps(sample).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 — http.server's naming
            found = self.path == "/-/shadow/mismatches"
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body if found else b"{}")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def get(proxies: list[str], token: bytes | None) -> httpx.Response:
    return get_from(lambda: proxies, token)


def get_from(proxies: Callable[[], list[str]], token: bytes | None) -> httpx.Response:
    app = build_app(FakeAgent(), sync=lambda: None, webhook_fetch=lambda: None, metrics=lambda: (b"", "text/plain"),
                    policy=AccessPolicy.build(TOKEN, "127.0.0.1"), shadow_mismatches=collector(proxies))
    headers = {"Authorization": "Bearer " + token.decode()} if token else {}

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            return await client.get("/shadow/mismatches", headers=headers)

    return asyncio.run(go())


def test_every_proxy_s_mismatches_come_back_newest_first_tagged_with_their_proxy() -> None:
    with proxy([mismatch(10.0, "/a"), mismatch(30.0, "/c")]) as one, proxy([mismatch(20.0, "/b")]) as two:
        body = get([one, two], TOKEN).json()
    assert [(m["path"], m["proxy"]) for m in body["mismatches"]] == [("/c", one), ("/b", two), ("/a", one)]
    assert body["mismatches"][0]["diff"] == "status 200 vs 500" and body["unreachable"] == []


def test_a_proxy_that_does_not_answer_is_listed_not_hidden() -> None:
    down = f"http://127.0.0.1:{free_port()}"
    with proxy([mismatch(10.0, "/a")]) as up:
        body = get([up, down], TOKEN).json()
    assert [m["path"] for m in body["mismatches"]] == ["/a"]
    assert body["unreachable"] == [{"proxy": down, "error": "unreachable (ConnectError)"}]


def test_the_mismatches_need_the_admin_token() -> None:
    with proxy([mismatch(10.0, "/a")]) as up:
        assert get([up], None).status_code == 401


def test_the_merged_sample_is_bounded() -> None:
    many = {"p": [mismatch(float(i), f"/{i}") for i in range(150)]}
    merged = merge(many)["mismatches"]
    assert len(merged) == 100 and merged[0]["path"] == "/149"


@pytest.mark.parametrize(("host", "url"), [("0.0.0.0", "http://127.0.0.1:8000"), ("10.0.0.5", "http://10.0.0.5:8000"),
                                           ("::1", "http://[::1]:8000")])
def test_the_agent_reaches_its_proxy_at_its_listen_address_or_loopback(host: str, url: str) -> None:
    assert proxy_url(host, 8000) == url


def cluster(*urls: str) -> ClusterStatus:
    """An observed status with one proxy per node, each at one of `urls`."""
    return ClusterStatus(proxies={
        f"node-{i}": ProxyStatus(actor_name=f"gitops-proxy-node-{i}", state=ProxyState.RUNNING,
                                 address=url.removeprefix("http://"))
        for i, url in enumerate(urls)
    })


def test_every_node_s_proxy_in_the_observed_status_is_asked() -> None:
    own = f"http://127.0.0.1:{free_port()}"  # nothing listens: asking it would list it unreachable
    with proxy([mismatch(10.0, "/a")]) as one, proxy([mismatch(20.0, "/b")]) as two, \
            proxy([mismatch(30.0, "/c")]) as three:
        observed = cluster(one, two, three)
        body = get_from(lambda: proxy_urls(observed, own), TOKEN).json()
    assert [(m["path"], m["proxy"]) for m in body["mismatches"]] == [("/c", three), ("/b", two), ("/a", one)]
    assert body["unreachable"] == []


def test_the_proxies_asked_follow_the_newest_observed_status() -> None:
    observed: list[ClusterStatus | None] = [None]
    with proxy([mismatch(10.0, "/own")]) as own, proxy([mismatch(20.0, "/new-node")]) as added:

        def collect() -> list[str]:  # read at each request
            return proxy_urls(observed[0], own)

        before = get_from(collect, TOKEN).json()
        observed[0] = cluster(own, added)
        after = get_from(collect, TOKEN).json()
    assert [m["proxy"] for m in before["mismatches"]] == [own]
    assert [m["proxy"] for m in after["mismatches"]] == [added, own]


def test_without_an_observed_status_the_agent_asks_its_own_proxy() -> None:
    assert proxy_urls(None, "http://127.0.0.1:8000") == ["http://127.0.0.1:8000"]
    assert proxy_urls(ClusterStatus(), "http://127.0.0.1:8000") == ["http://127.0.0.1:8000"]


def test_proxies_sharing_one_address_are_asked_once() -> None:
    # Proxies bound to 127.0.0.1 on every node: from the agent, all are its own node's.
    assert proxy_urls(cluster("http://127.0.0.1:8000", "http://127.0.0.1:8000"), "http://own:1") == [
        "http://127.0.0.1:8000"]
