"""OIDC bearer tokens on the admin API (issue 47 item 2), against a loopback
issuer the test makes (`tests.support.oidc.Issuer`, its keys generated here):
the right group rolls back and is named in the audit trail; an expired
`exp`, a wrong `aud` or `iss`, a future `nbf`, `alg: none`, an HMAC made
with the public key, an unknown key and a token without a mapped group
cannot; key rotation is followed, and unknown key ids are fetched for at
most once per bound."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from gitops.admin.auth.access import AccessPolicy, BearerRefused
from gitops.admin.api import build_app
from gitops.admin.auth.oidc import OidcSettings, OidcVerifier, check_issuer_url, parse_group_roles
from gitops.admin.auth.roles import Role
from gitops.errors import UserError
from tests.support.admin import AuditedAgent as Audited
from tests.support.oidc import Issuer, unsigned


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    made = Issuer()
    yield made
    made.close()


def settings(issuer: Issuer, **more) -> OidcSettings:
    return OidcSettings(issuer=issuer.url, audience="ray-gitops",
                        group_roles={"ops": Role.OPERATOR, "viewers": Role.VIEWER, "platform": Role.ADMIN}, **more)


def verify(verifier: OidcVerifier, token: str):
    return asyncio.run(verifier(token))


def refused(verifier: OidcVerifier, token: str) -> str:
    with pytest.raises(BearerRefused) as raised:
        verify(verifier, token)
    return str(raised.value)



def rollback_with(issuer: Issuer, tmp_path: Path, token: str) -> tuple[httpx.Response, Audited]:
    agent = Audited(tmp_path / "history.db")
    verifier = OidcVerifier(settings(issuer))
    app = build_app(agent, sync=lambda: None, webhook_fetch=lambda: None, metrics=lambda: (b"", "text/plain"),
                    policy=AccessPolicy.build(None, "127.0.0.1", verifier=verifier), audit=agent)

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            return await client.post("/rollback?reason=sso", headers={"Authorization": f"Bearer {token}"})

    return asyncio.run(go()), agent


def test_the_right_group_rolls_back_and_history_names_the_subject(issuer: Issuer, tmp_path: Path) -> None:
    response, agent = rollback_with(issuer, tmp_path, issuer.mint(sub="alice@example.com", groups=["ops"]))
    assert response.status_code == 200, response.text
    (action,) = agent.actions()
    assert (action.actor, action.via, action.verb, action.reason) == ("alice@example.com", "oidc", "rollback", "sso")


@pytest.mark.parametrize(("claims", "why"), [
    ({"exp": 1_000_000}, "expired (exp)"),
    ({"aud": "another-app"}, "wrong audience (aud)"),
    ({"iss": "https://evil.example"}, "wrong issuer (iss)"),
    ({"nbf": 4_000_000_000}, "not valid yet (nbf)"),
    ({"groups": ["viewers"]}, "viewer; this needs operator"),
    ({"groups": ["strangers"]}, "no group of 'alice' maps to a role"),
    ({"exp": None}, "MissingRequiredClaimError"),
])
def test_a_bad_token_cannot_roll_back(issuer: Issuer, tmp_path: Path, claims: dict, why: str) -> None:
    response, agent = rollback_with(issuer, tmp_path, issuer.mint(**claims))
    assert response.status_code in (401, 403) and why in response.json()["error"], response.text
    assert agent.actions() == []


def test_alg_none_cannot_roll_back(issuer: Issuer, tmp_path: Path) -> None:
    token = unsigned({"alg": "none", "typ": "JWT", "kid": issuer.keys[-1][0]}, issuer.claims())
    response, agent = rollback_with(issuer, tmp_path, token)
    assert response.status_code == 401 and "algorithm 'none' is not allowed" in response.json()["error"]
    assert agent.actions() == []


def test_an_hmac_made_with_the_public_key_is_refused(issuer: Issuer) -> None:
    header = {"alg": "HS256", "typ": "JWT", "kid": issuer.keys[-1][0]}
    signing = unsigned(header, issuer.claims()).rstrip(".")
    mac = hmac.new(issuer.public_pem(), signing.encode(), hashlib.sha256).digest()
    token = signing + "." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
    assert "algorithm 'HS256' is not allowed" in refused(OidcVerifier(settings(issuer)), token)


def test_an_rs256_header_on_an_ec_key_is_refused(issuer: Issuer) -> None:
    kid = issuer.rotate("EC")
    token = issuer.mint(alg="ES256")
    assert verify(OidcVerifier(settings(issuer)), token).name == "alice"
    forged = unsigned({"alg": "RS256", "kid": kid}, issuer.claims()) + "c2ln"
    assert "is not a key for RS256" in refused(OidcVerifier(settings(issuer)), forged)


def test_a_key_not_the_issuers_is_refused(issuer: Issuer) -> None:
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = issuer.mint(key=stranger, kid=issuer.keys[-1][0])
    assert refused(OidcVerifier(settings(issuer)), token) == "InvalidSignatureError"
    assert "unknown key id" in refused(OidcVerifier(settings(issuer)), issuer.mint(key=stranger, kid="made-up"))


def test_a_rotated_key_is_fetched_once_and_unknown_kids_are_rate_bound(issuer: Issuer) -> None:
    now = [1000.0]
    verifier = OidcVerifier(settings(issuer), clock=lambda: now[0])
    assert verify(verifier, issuer.mint()).role is Role.OPERATOR and issuer.jwks_fetches == 1
    verify(verifier, issuer.mint())
    assert issuer.jwks_fetches == 1  # cached
    now[0] += 61
    issuer.rotate()
    assert verify(verifier, issuer.mint(groups=["platform"])).role is Role.ADMIN
    assert issuer.jwks_fetches == 2  # the new kid made one refetch
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    for n in range(20):
        refused(verifier, issuer.mint(key=stranger, kid=f"made-up-{n}"))
    assert issuer.jwks_fetches == 2  # within the bound: no fetch for made-up kids


def test_the_issuer_must_be_https_or_loopback_and_roles_parse() -> None:
    assert check_issuer_url("https://id.example.com/") == "https://id.example.com"
    assert check_issuer_url("http://127.0.0.1:9/x") == "http://127.0.0.1:9/x"
    with pytest.raises(UserError, match="must be an https:// URL"):
        check_issuer_url("http://id.example.com")
    assert parse_group_roles(["ops=operator", "a=b=viewer"]) == {"ops": Role.OPERATOR, "a=b": Role.VIEWER}
    with pytest.raises(UserError, match="unknown role 'root'"):
        parse_group_roles(["ops=root"])
