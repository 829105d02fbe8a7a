"""The agent's `GET /shadow/mismatches`: every proxy's sample merged newest first, behind the admin token.

Which proxies are asked comes from an observed cluster status (one running
worker per address); asking is the controller client's Ray call, played
here by `Proxies`, a fake of `ControllerClient.proxy_mismatches` that
answers per actor name; the admin app runs in-process.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import httpx

from gitops.admin.auth.access import AccessPolicy
from gitops.admin.api import build_app
from gitops.admin.shadow_mismatches import collector, merge, proxies_to_ask
from tests.support.admin import FakeAgent
from vocabulary.control.status import ClusterStatus, ProxyState, ProxyStatus

TOKEN = b"admin-token"


def mismatch(at: float, path: str) -> dict[str, Any]:
    return {"at": at, "endpoint": "echo", "backend": "v3", "path": path, "primary_status": 200,
            "shadow_status": 500, "diff": "status 200 != 500"}


class Proxies:
    """Answers as `ControllerClient.proxy_mismatches` does: per actor name, a sample or why none."""

    def __init__(self, samples: dict[str, list[dict[str, Any]] | str], silent: frozenset[str] = frozenset()) -> None:
        self.samples = samples
        self.silent = silent
        self.asked: list[str] = []

    async def ask(self, actor_name: str) -> list[dict[str, Any]] | str:
        self.asked.append(actor_name)
        if actor_name in self.silent:
            await asyncio.Event().wait()  # a proxy that never answers
        return self.samples.get(actor_name, "unreachable (no such proxy)")


def get_from(proxies: Proxies, which: Callable[[], dict[str, str]], token: bytes | None) -> httpx.Response:
    app = build_app(FakeAgent(), sync=lambda: None, webhook_fetch=lambda: None, metrics=lambda: (b"", "text/plain"),
                    policy=AccessPolicy.build(TOKEN, "127.0.0.1"),
                    shadow_mismatches=collector(proxies.ask, which, timeout_s=0.2))
    headers = {"Authorization": "Bearer " + token.decode()} if token else {}

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            return await client.get("/shadow/mismatches", headers=headers)

    return asyncio.run(go())


def proxy(node: str, address: str, worker: int = 0, state: ProxyState = ProxyState.RUNNING) -> ProxyStatus:
    return ProxyStatus(actor_name=f"gitops-proxy-{node}-{worker}", state=state, address=address, worker=worker)


def cluster(*proxies: ProxyStatus) -> ClusterStatus:
    return ClusterStatus(proxies={p.actor_name: p for p in proxies})


def test_every_proxy_s_mismatches_come_back_newest_first_tagged_with_their_address() -> None:
    observed = cluster(proxy("a", "10.0.0.1:8000"), proxy("b", "10.0.0.2:8000"))
    proxies = Proxies({"gitops-proxy-a-0": [mismatch(10.0, "/a"), mismatch(30.0, "/c")],
                       "gitops-proxy-b-0": [mismatch(20.0, "/b")]})
    body = get_from(proxies, lambda: proxies_to_ask(observed), TOKEN).json()
    one, two = "http://10.0.0.1:8000", "http://10.0.0.2:8000"
    assert [(m["path"], m["proxy"]) for m in body["mismatches"]] == [("/c", one), ("/b", two), ("/a", one)]
    assert body["mismatches"][0]["diff"] == "status 200 != 500" and body["unreachable"] == []


def test_a_proxy_that_does_not_answer_is_listed_not_hidden() -> None:
    observed = cluster(proxy("up", "10.0.0.1:8000"), proxy("gone", "10.0.0.2:8000"), proxy("stuck", "10.0.0.3:8000"))
    proxies = Proxies({"gitops-proxy-up-0": [mismatch(10.0, "/a")]}, silent=frozenset({"gitops-proxy-stuck-0"}))
    body = get_from(proxies, lambda: proxies_to_ask(observed), TOKEN).json()
    assert [m["path"] for m in body["mismatches"]] == ["/a"]
    assert body["unreachable"] == [{"proxy": "http://10.0.0.2:8000", "error": "unreachable (no such proxy)"},
                                   {"proxy": "http://10.0.0.3:8000", "error": "no answer within 0.2 s"}]


def test_the_mismatches_need_the_admin_token() -> None:
    proxies = Proxies({"gitops-proxy-a-0": [mismatch(10.0, "/a")]})
    assert get_from(proxies, lambda: proxies_to_ask(cluster(proxy("a", "10.0.0.1:8000"))), None).status_code == 401
    assert proxies.asked == []


def test_the_merged_sample_is_bounded() -> None:
    many: dict[str, list[dict[str, Any]] | str] = {"p": [mismatch(float(i), f"/{i}") for i in range(150)]}
    merged = merge(many)["mismatches"]
    assert len(merged) == 100 and merged[0]["path"] == "/149"


def test_the_proxies_asked_follow_the_newest_observed_status() -> None:
    observed: list[ClusterStatus | None] = [None]
    proxies = Proxies({"gitops-proxy-own-0": [mismatch(10.0, "/own")], "gitops-proxy-new-0": [mismatch(20.0, "/new")]})
    before = get_from(proxies, lambda: proxies_to_ask(observed[0]), TOKEN).json()
    observed[0] = cluster(proxy("own", "10.0.0.1:8000"), proxy("new", "10.0.0.2:8000"))
    after = get_from(proxies, lambda: proxies_to_ask(observed[0]), TOKEN).json()
    assert before == {"mismatches": [], "unreachable": []}  # no status yet: no proxy known to ask
    assert [m["path"] for m in after["mismatches"]] == ["/new", "/own"]


def test_one_running_worker_per_address_is_asked() -> None:
    # A node's workers share its address and each answers the node's mismatches; one that is not running is skipped.
    observed = cluster(proxy("a", "10.0.0.1:8000", worker=1), proxy("a", "10.0.0.1:8000", worker=0,
                                                                       state=ProxyState.BACKOFF),
                       proxy("a", "10.0.0.1:8000", worker=2), proxy("b", "10.0.0.2:8000"))
    assert proxies_to_ask(observed) == {"http://10.0.0.1:8000": "gitops-proxy-a-1",
                                        "http://10.0.0.2:8000": "gitops-proxy-b-0"}
    assert proxies_to_ask(None) == {} and proxies_to_ask(ClusterStatus()) == {}
