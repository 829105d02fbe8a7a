"""Roles over the admin API (issue 47 item 1), in-process: a matrix generated
from the router itself, so a route added without a row of the role table
(`gitops.admin.auth.roles.ROUTES`) fails here; the token file's lines, scopes and
reload.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

import httpx
import pytest

from gitops.admin.auth.access import AccessPolicy
from gitops.admin.api import build_app
from gitops.admin.events import EventLimits
from gitops.admin.auth.roles import ROUTES, Role, rule_for
from gitops.admin.auth.tokens import TokenFile, parse_tokens
from gitops.errors import UserError
from tests.support.admin import FakeAgent

TOKENS = {"vera": ("viewer", "tok-viewer-1"), "otto": ("operator", "tok-operator-2"), "ada": ("admin", "tok-admin-3")}


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_file(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "tokens"
    path.write_text("# name role sha256\n" + "\n".join(lines) + "\n")
    return path


def three_tokens(tmp_path: Path) -> TokenFile:
    return TokenFile(token_file(tmp_path, [f"{name} {role} {digest(tok)}" for name, (role, tok) in TOKENS.items()]))


# The page's live stream ends after 0.2 s here: the in-process transport answers once the app is done.
SHORT_STREAMS = EventLimits(lifetime_s=0.2, poll_s=0.05)


def app_with(policy: AccessPolicy):
    agent = FakeAgent()
    return agent, build_app(agent, sync=lambda: None, webhook_fetch=lambda: None,
                            metrics=lambda: (b"", "text/plain"), policy=policy, events=SHORT_STREAMS)


def call(app, method: str, path: str, token: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            return await client.request(method, path, headers=headers)

    return asyncio.run(go())


def every_route(app) -> list[tuple[str, str]]:
    """(method, declared path) of every route the router serves, HEAD folded into GET."""
    found = []
    for route in app.routes:
        for method in sorted(route.methods or ()):
            if method != "HEAD":
                found.append((method, route.path))
    return found


def concrete(path: str) -> str:
    return path.replace("{backend}", "web")


def test_every_route_of_the_router_has_a_row_and_every_row_a_route(tmp_path: Path) -> None:
    _, app = app_with(AccessPolicy.build(None, "127.0.0.1"))
    served = set(every_route(app))
    assert served == set(ROUTES), f"routes without a row: {served - set(ROUTES)}; rows without a route: {set(ROUTES) - served}"


def test_three_tokens_get_exactly_their_roles_rights_on_every_route(tmp_path: Path) -> None:
    tokens = three_tokens(tmp_path)
    checked = 0
    for name, (role_text, token) in TOKENS.items():
        role = Role.parse(role_text)
        agent, app = app_with(AccessPolicy.build(None, "127.0.0.1", tokens=tokens.table))
        for method, path in every_route(app):
            if path == "/hooks/git":
                continue  # its own HMAC guard answers (404 here: no webhook configured)
            rule = rule_for(method, path)
            status = call(app, method, concrete(path), token).status_code
            if rule.role is None or role >= rule.role:
                assert status not in (401, 403), (name, method, path, status)
            else:
                assert status == 403, (name, method, path, status)
            checked += 1
    assert checked >= 3 * 12


def test_without_a_token_every_guarded_route_is_401_and_open_ones_answer(tmp_path: Path) -> None:
    agent, app = app_with(AccessPolicy.build(None, "127.0.0.1", tokens=three_tokens(tmp_path).table))
    for method, path in every_route(app):
        status = call(app, method, concrete(path), None).status_code
        if rule_for(method, path).role is None:
            assert status not in (401, 403), (method, path)
        else:
            assert status == 401, (method, path)
    assert not agent.suspended and agent.syncs == 0


def test_a_viewer_cannot_suspend_and_the_agent_is_untouched(tmp_path: Path) -> None:
    agent, app = app_with(AccessPolicy.build(None, "127.0.0.1", tokens=three_tokens(tmp_path).table))
    response = call(app, "POST", "/suspend", "tok-viewer-1")
    assert response.status_code == 403 and "vera is viewer; this needs operator" in response.json()["error"]
    assert not agent.suspended


def test_a_route_unknown_to_the_table_needs_admin() -> None:
    assert rule_for("POST", "/something-new").role is Role.ADMIN
    assert rule_for("GET", None).role is Role.ADMIN
    assert rule_for("HEAD", "/status") == rule_for("GET", "/status")


def test_the_old_single_token_is_one_admin_token() -> None:
    agent, app = app_with(AccessPolicy.build(b"old-single", "127.0.0.1"))
    assert call(app, "GET", "/shadow/mismatches", "old-single").status_code == 200
    assert call(app, "POST", "/suspend", "old-single").status_code == 200 and agent.suspended


def test_both_the_old_token_and_the_file_work_together(tmp_path: Path) -> None:
    _, app = app_with(AccessPolicy.build(b"old-single", "127.0.0.1", tokens=three_tokens(tmp_path).table))
    assert call(app, "GET", "/status", "old-single").status_code == 200
    assert call(app, "GET", "/status", "tok-viewer-1").status_code == 200
    assert call(app, "GET", "/status", "tok-nobody").status_code == 401


def test_an_environment_scope_holds_only_on_its_environment(tmp_path: Path) -> None:
    path = token_file(tmp_path, [f"prod-op operator {digest('tok-p')} environment=prod"])
    for environment, expected in (("prod", 200), ("staging", 403), (None, 403)):
        agent, app = app_with(AccessPolicy.build(None, "127.0.0.1", tokens=TokenFile(path).table,
                                                 environment=environment))
        assert call(app, "POST", "/suspend", "tok-p").status_code == expected, environment


def test_an_endpoint_scope_reads_but_cannot_act_on_the_whole_agent(tmp_path: Path) -> None:
    path = token_file(tmp_path, [f"web-op operator {digest('tok-w')} endpoint=web"])
    agent, app = app_with(AccessPolicy.build(None, "127.0.0.1", tokens=TokenFile(path).table))
    assert call(app, "GET", "/status", "tok-w").status_code == 200
    response = call(app, "POST", "/rollback", "tok-w")
    assert response.status_code == 403 and "scoped to endpoint web" in response.json()["error"]


@pytest.mark.parametrize(("line", "message"), [
    ("ada admin", "expected NAME ROLE SHA256"),
    ("ada root " + "a" * 64, "unknown role 'root'"),
    ("ada admin tok-admin-3", "SHA-256 in hex"),
    ("ada admin " + "a" * 64 + " team=x", "is not environment=NAME or endpoint=NAME"),
    ("a/b admin " + "a" * 64, "token name"),
])
def test_a_bad_line_is_an_error_at_its_line(line: str, message: str) -> None:
    with pytest.raises(UserError) as raised:
        parse_tokens(f"# tokens\nvera viewer {'b' * 64}\n{line}\n", "tokens.txt")
    assert str(raised.value).startswith("tokens.txt:3: ") and message in str(raised.value)


def test_a_name_twice_is_refused() -> None:
    with pytest.raises(UserError, match="tokens.txt:2: token name 'ada' already on line 1"):
        parse_tokens(f"ada admin {'a' * 64}\nada viewer {'b' * 64}\n", "tokens.txt")


def test_the_file_is_read_again_when_it_changes_and_a_broken_one_keeps_the_last_good(tmp_path: Path) -> None:
    now = [0.0]
    path = token_file(tmp_path, [f"vera viewer {digest('one')}"])
    tokens = TokenFile(path, clock=lambda: now[0])
    assert tokens.table().find("one") is not None
    path.write_text(f"vera viewer {digest('two')}\n")
    os.utime(path, ns=(1, 1))
    now[0] += 2
    table = tokens.table()
    assert table.find("two") is not None and table.find("one") is None
    path.write_text("vera viewer not-a-digest\n")
    os.utime(path, ns=(2, 2))
    now[0] += 2
    assert tokens.table().find("two") is not None


def test_the_file_never_needs_a_plaintext_token() -> None:
    table = parse_tokens(f"ada admin {digest('s3cret')}\n", "t")
    found = table.find("s3cret")
    assert found is not None and found.name == "ada" and found.role is Role.ADMIN
    assert table.find(digest("s3cret")) is None  # the digest itself is no token


def test_a_window_override_is_recorded_with_the_tokens_name(tmp_path: Path) -> None:
    asked: list[str] = []
    agent = FakeAgent()
    app = build_app(agent, sync=lambda: None, webhook_fetch=lambda: None, metrics=lambda: (b"", "text/plain"),
                    policy=AccessPolicy.build(b"old-single", "127.0.0.1", tokens=three_tokens(tmp_path).table),
                    override_window=asked.append)
    assert call(app, "POST", "/sync?override_window=1", "tok-operator-2").json()["by"] == "otto"
    fingerprint = hashlib.sha256(b"old-single").hexdigest()[:12]
    assert call(app, "POST", "/sync?override_window=1", "old-single").json()["by"] == f"admin token sha256:{fingerprint}"
    assert asked == ["otto", f"admin token sha256:{fingerprint}"]
