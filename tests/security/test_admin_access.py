"""Hostile callers of the admin API (issue 11 rows 3 and 4), in-process.

Each case asserts the precise refusal and that nothing reached the agent:
no suspension, no sync, no status or history handed out.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from gitops.admin.auth.access import AccessPolicy
from gitops.admin.api import WebhookGuard, build_webhook_app
from gitops.admin.webhooks import sign
from tests.support.admin import ANONYMOUS_PAGE, BODY, SECRET, FakeAgent, request

TOKEN = b"s3cret-admin-token"
GUARDED = AccessPolicy.build(TOKEN, "127.0.0.1")
BEARER = {"Authorization": "Bearer s3cret-admin-token"}


def untouched(agent: FakeAgent) -> bool:
    return not agent.suspended and agent.syncs == 0 and agent.fetches == 0


def test_suspend_without_the_token_is_401_and_suspends_nothing() -> None:
    agent = FakeAgent()
    response = request(agent, "POST", "/suspend", policy=GUARDED)
    assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
    assert untouched(agent)


def test_a_wrong_token_is_401_and_syncs_nothing() -> None:
    agent = FakeAgent()
    response = request(agent, "POST", "/sync", policy=GUARDED, headers={"Authorization": "Bearer guess"})
    assert response.status_code == 401 and untouched(agent)


def test_a_token_of_another_scheme_is_401() -> None:
    agent = FakeAgent()
    response = request(agent, "POST", "/sync", policy=GUARDED, headers={"Authorization": "Basic s3cret-admin-token"})
    assert response.status_code == 401 and untouched(agent)


def test_status_and_history_without_the_token_are_401_and_reveal_nothing() -> None:
    for path in ("/status", "/history", "/"):
        response = request(FakeAgent(), "GET", path, policy=GUARDED)
        assert response.status_code == 401 and set(response.json()) == {"error"}, path


def test_the_right_token_is_obeyed() -> None:
    agent = FakeAgent()
    assert request(agent, "POST", "/suspend", policy=GUARDED, headers=BEARER).status_code == 200
    assert agent.suspended


def test_metrics_and_healthz_stay_open_with_a_token() -> None:
    for path in ("/metrics", "/healthz"):
        assert request(FakeAgent(), "GET", path, policy=GUARDED).status_code == 200, path


def test_a_rebound_host_name_is_403_and_gets_no_status() -> None:
    # DNS rebinding: the attacker's name now resolves to 127.0.0.1; the Host header still says it.
    response = request(FakeAgent(), "GET", "/status", headers={"Host": "attacker.example:8001"})
    assert response.status_code == 403 and "attacker.example" in response.json()["error"]
    assert "status" not in response.json()


def test_a_rebound_host_name_cannot_suspend() -> None:
    agent = FakeAgent()
    response = request(agent, "POST", "/suspend", headers={"Host": "attacker.example"})
    assert response.status_code == 403 and untouched(agent)


def test_a_cross_site_post_is_403_and_suspends_nothing() -> None:
    agent = FakeAgent()
    response = request(agent, "POST", "/suspend", headers={"Origin": "https://attacker.example"})
    assert response.status_code == 403 and "cross-origin" in response.json()["error"]
    assert untouched(agent)


def test_a_post_from_an_opaque_origin_is_403() -> None:
    agent = FakeAgent()
    response = request(agent, "POST", "/sync", headers={"Origin": "null"})
    assert response.status_code == 403 and untouched(agent)


def test_a_post_from_the_agents_own_page_is_allowed_with_the_pages_csrf_token() -> None:
    agent = FakeAgent()
    response = request(agent, "POST", "/suspend",
                       headers={"Host": "127.0.0.1:8001", "Origin": "http://127.0.0.1:8001", **ANONYMOUS_PAGE})
    assert response.status_code == 200 and agent.suspended


def test_a_same_origin_post_without_the_pages_csrf_token_is_403() -> None:
    # A page of the agent's own origin (a script injected there, or a viewer's hand-made
    # request in the browser's console) cannot act without the token the page was given.
    for extra in ({}, {"X-CSRF-Token": "1700000000.deadbeef"}, {"X-CSRF-Token": ""}):
        agent = FakeAgent()
        response = request(agent, "POST", "/rollback",
                           headers={"Host": "127.0.0.1:8001", "Origin": "http://127.0.0.1:8001", **extra})
        assert response.status_code == 403 and "X-CSRF-Token" in response.json()["error"], extra
        assert untouched(agent)


def test_an_allowed_extra_host_is_answered() -> None:
    policy = AccessPolicy.build(None, "0.0.0.0", ["gitops.internal"])
    response = request(FakeAgent(), "GET", "/status", policy=policy, headers={"Host": "gitops.internal:8001"})
    assert response.status_code == 200


def test_a_wildcard_bind_does_not_allow_every_host() -> None:
    policy = AccessPolicy.build(TOKEN, "0.0.0.0")
    response = request(FakeAgent(), "GET", "/metrics", policy=policy, headers={"Host": "attacker.example"})
    assert response.status_code == 403


def test_the_admin_listener_without_the_webhook_does_not_serve_it() -> None:
    agent = FakeAgent()
    response = request(agent, "POST", "/hooks/git", content=BODY, headers={"X-Hub-Signature-256": sign(SECRET, BODY)})
    assert response.status_code == 404 and untouched(agent)


def webhook_listener(agent: FakeAgent, method: str, path: str, **kwargs: Any) -> httpx.Response:
    def fetch() -> None:
        agent.fetches += 1

    app = build_webhook_app(WebhookGuard(SECRET), fetch)
    transport = httpx.ASGITransport(app=app)

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=transport, base_url="http://hooks.example") as client:
            return await client.request(method, path, **kwargs)

    return asyncio.run(go())


def test_the_webhook_listener_serves_nothing_but_the_webhook() -> None:
    agent = FakeAgent()
    for method, path in [("POST", "/suspend"), ("POST", "/sync"), ("GET", "/status"), ("GET", "/history"),
                         ("GET", "/metrics"), ("GET", "/")]:
        assert webhook_listener(agent, method, path).status_code == 404, path
    assert untouched(agent)


def test_the_webhook_listener_takes_a_signed_push_under_any_host_name() -> None:
    agent = FakeAgent()
    response = webhook_listener(agent, "POST", "/hooks/git", content=BODY,
                                headers={"X-Hub-Signature-256": sign(SECRET, BODY)})
    assert response.status_code == 202 and agent.fetches == 1


def test_row9_a_page_on_another_loopback_port_cannot_post() -> None:
    # An app the proxy serves on :8000 is same-site, not same-origin: no token needed otherwise.
    for origin in ("http://127.0.0.1:8000", "http://localhost:8000", "http://127.0.0.1", "https://127.0.0.1:8000"):
        for path in ("/suspend", "/sync", "/rollback"):
            agent = FakeAgent()
            response = request(agent, "POST", path, headers={"Host": "127.0.0.1:8001", "Origin": origin})
            assert response.status_code == 403 and "cross-origin" in response.json()["error"], (origin, path)
            assert untouched(agent), (origin, path)


def test_row9_the_listener_s_own_origin_under_any_allowed_name_may_post() -> None:
    for origin in ("http://127.0.0.1:8001", "http://localhost:8001", "http://[::1]:8001"):
        agent = FakeAgent()
        response = request(agent, "POST", "/suspend",
                           headers={"Host": "127.0.0.1:8001", "Origin": origin, **ANONYMOUS_PAGE})
        assert response.status_code == 200 and agent.suspended, origin


def test_row9_a_reverse_proxy_s_https_origin_on_its_default_port_may_post() -> None:
    policy = AccessPolicy.build(None, "127.0.0.1", ["gitops.internal"])
    agent = FakeAgent()
    response = request(agent, "POST", "/suspend", policy=policy,
                       headers={"Host": "gitops.internal", "Origin": "https://gitops.internal", **ANONYMOUS_PAGE})
    assert response.status_code == 200 and agent.suspended
    agent = FakeAgent()
    response = request(agent, "POST", "/suspend", policy=policy,
                       headers={"Host": "gitops.internal", "Origin": "https://gitops.internal:8443"})
    assert response.status_code == 403 and untouched(agent)


def test_row9_an_origin_of_another_scheme_or_a_bad_port_is_refused() -> None:
    for origin in ("ftp://127.0.0.1:8001", "http://127.0.0.1:notaport", "chrome-extension://abc"):
        agent = FakeAgent()
        response = request(agent, "POST", "/sync", headers={"Host": "127.0.0.1:8001", "Origin": origin})
        assert response.status_code == 403 and untouched(agent), origin
