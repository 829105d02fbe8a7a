"""The status page's sign-in at a loopback OIDC issuer (issue 47 item 2):
authorization code with PKCE, a session cookie, CSRF on its POSTs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Iterator
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from gitops.admin.auth.access import AccessPolicy
from gitops.admin.api import build_app
from gitops.admin.auth.login import COOKIE, Logins, challenge_of
from gitops.admin.auth.oidc import OidcSettings, OidcVerifier
from gitops.admin.auth.roles import Role
from tests.support.oidc import Issuer
from tests.support.admin import AuditedAgent as Audited


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    made = Issuer()
    yield made
    made.close()


def signed_in_app(issuer: Issuer, tmp_path: Path):
    verifier = OidcVerifier(OidcSettings(issuer=issuer.url, audience="ray-gitops", client_id="status-page",
                                         group_roles={"ops": Role.OPERATOR, "readers": Role.VIEWER}))
    agent = Audited(tmp_path / "history.db")
    app = build_app(agent, sync=lambda: None, webhook_fetch=lambda: None, metrics=lambda: (b"", "text/plain"),
                    policy=AccessPolicy.build(None, "127.0.0.1", verifier=verifier, sessions=verifier.logins.session),
                    audit=agent, sign_in=verifier)
    return agent, app


async def sign_in(app, issuer: Issuer) -> httpx.AsyncClient:
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")
    start = await client.get("/login")
    assert start.status_code == 302
    authorize = start.headers["location"]
    query = parse_qs(urlsplit(authorize).query)
    assert authorize.startswith(issuer.url + "/authorize?") and query["code_challenge_method"] == ["S256"]
    assert query["redirect_uri"] == ["http://127.0.0.1/login/callback"] and query["client_id"] == ["status-page"]
    async with httpx.AsyncClient() as browser:
        back = await browser.get(authorize)
    assert back.status_code == 302
    landed = await client.get(back.headers["location"].removeprefix("http://127.0.0.1"))
    assert landed.status_code == 303 and landed.headers["location"] == "/"
    cookie = landed.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=") and "HttpOnly" in cookie and "SameSite=Lax" in cookie
    return client


def test_an_operator_signs_in_and_rolls_back_with_the_csrf_token(issuer: Issuer, tmp_path: Path) -> None:
    agent, app = signed_in_app(issuer, tmp_path)
    issuer.login_user = {"sub": "alice", "groups": ["ops"]}

    async def go() -> None:
        client = await sign_in(app, issuer)
        try:
            me = (await client.get("/session")).json()
            assert (me["name"], me["role"], me["via"]) == ("alice", "operator", "oidc") and me["csrf"]
            assert (await client.get("/status")).status_code == 200
            forged = await client.post("/rollback")
            assert forged.status_code == 403 and "X-CSRF-Token" in forged.json()["error"]
            done = await client.post("/rollback?reason=from%20the%20page", headers={"X-CSRF-Token": me["csrf"]})
            assert done.status_code == 200, done.text
        finally:
            await client.aclose()

    asyncio.run(go())
    (action,) = agent.actions()
    assert (action.actor, action.via, action.verb, action.reason) == ("alice", "oidc", "rollback", "from the page")


def test_a_viewer_signed_in_gets_403_on_rollback(issuer: Issuer, tmp_path: Path) -> None:
    agent, app = signed_in_app(issuer, tmp_path)
    issuer.login_user = {"sub": "victor", "groups": ["readers"]}

    async def go() -> None:
        client = await sign_in(app, issuer)
        try:
            me = (await client.get("/session")).json()
            response = await client.post("/rollback", headers={"X-CSRF-Token": me["csrf"]})
            assert response.status_code == 403 and "victor is viewer" in response.json()["error"]
        finally:
            await client.aclose()

    asyncio.run(go())
    assert agent.actions() == []


def test_a_callback_with_an_unknown_state_or_a_wrong_verifier_opens_no_session(issuer: Issuer, tmp_path: Path) -> None:
    _, app = signed_in_app(issuer, tmp_path)

    async def go() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            response = await client.get("/login/callback?code=x&state=made-up")
            assert response.status_code == 400 and "set-cookie" not in response.headers
            assert (await client.get("/status")).status_code == 401

    asyncio.run(go())


def test_pending_sign_ins_expire_are_taken_once_and_sessions_end_at_exp() -> None:
    now = [1000.0]
    logins = Logins(clock=lambda: now[0], max_pending=2)
    state, verifier = logins.begin("http://127.0.0.1/login/callback")
    assert len(challenge_of(verifier)) == 43
    found = logins.finish(state)
    assert found is not None and found.verifier == verifier and logins.finish(state) is None
    late, _ = logins.begin("u")
    now[0] += 601
    assert logins.finish(late) is None
    from gitops.admin.auth.roles import Principal

    session = logins.open(Principal("alice", Role.VIEWER, via="oidc"), token_expires_at=now[0] + 60)
    assert logins.session(session.id) is session
    now[0] += 61
    assert logins.session(session.id) is None
