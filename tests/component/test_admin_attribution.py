"""Every mutating admin call attributed (issue 47 item 3): who (the token's
name), from where (the peer), why (`reason`), in the ledger's audit trail,
`/history?actor=`, the `/audit` JSON lines and the `action` notification."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import httpx

from gitops.admin.auth.access import AccessPolicy
from gitops.admin.api import build_app
from gitops.admin.auth.tokens import parse_tokens
from gitops.loop.history import History
from gitops.notifications.events import Event, EventKind, describe
from gitops.reconcile.outcomes import Action
from tests.support.admin import AuditedAgent as Audited



def tokens():
    lines = [f"otto operator {hashlib.sha256(b'tok-o').hexdigest()}",
             f"ada admin {hashlib.sha256(b'tok-a').hexdigest()}"]
    table = parse_tokens("\n".join(lines), "tokens")
    return lambda: table


def call(app, method: str, path: str, token: str) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, client=("10.1.2.3", 5555))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            return await client.request(method, path, headers={"Authorization": f"Bearer {token}"})

    return asyncio.run(go())


def audited_app(tmp_path: Path):
    agent = Audited(tmp_path / "history.db")
    app = build_app(agent, sync=lambda: None, webhook_fetch=lambda: None, metrics=lambda: (b"", "text/plain"),
                    policy=AccessPolicy.build(None, "127.0.0.1", tokens=tokens()), audit=agent)
    return agent, app


def test_each_verb_is_recorded_with_actor_peer_and_reason(tmp_path: Path) -> None:
    agent, app = audited_app(tmp_path)
    assert call(app, "POST", "/suspend?reason=db%20maintenance", "tok-o").status_code == 200
    assert call(app, "POST", "/resume", "tok-a").status_code == 200
    assert call(app, "POST", "/rollback?reason=bad%20deploy", "tok-o").status_code == 200
    assert call(app, "POST", "/sync", "tok-o").status_code == 202
    rows = agent.actions()
    assert [(r.verb, r.actor, r.peer, r.reason, r.via) for r in rows] == [
        ("sync", "otto", "10.1.2.3", "", "token"),
        ("rollback", "otto", "10.1.2.3", "bad deploy", "token"),
        ("resume", "ada", "10.1.2.3", "", "token"),
        ("suspend", "otto", "10.1.2.3", "db maintenance", "token"),
    ]
    assert rows[1].detail.startswith("to bbbbbbb, holding ccccccc")


def test_a_refused_rollback_is_recorded_as_refused(tmp_path: Path) -> None:
    agent, app = audited_app(tmp_path)
    assert call(app, "POST", "/rollback?commit=0000000", "tok-o").status_code == 409
    (row,) = agent.actions()
    assert row.result.startswith("refused: commit 0000000 was never applied")


def test_a_reason_too_long_is_refused_before_anything_happens(tmp_path: Path) -> None:
    agent, app = audited_app(tmp_path)
    response = call(app, "POST", "/suspend?reason=" + "x" * 501, "tok-o")
    assert response.status_code == 400 and not agent.suspended and agent.actions() == []


def test_history_by_actor_and_the_audit_export(tmp_path: Path) -> None:
    agent, app = audited_app(tmp_path)
    call(app, "POST", "/suspend", "tok-o")
    call(app, "POST", "/resume", "tok-a")
    mine = call(app, "GET", "/history?actor=otto", "tok-o").json()
    assert [a["verb"] for a in mine["actions"]] == ["suspend"] and mine["entries"] == []
    assert call(app, "GET", "/audit", "tok-o").status_code == 403  # the export is admin's
    export = call(app, "GET", "/audit", "tok-a")
    assert export.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in export.text.splitlines()]
    assert [(line["verb"], line["actor"], line["peer"]) for line in lines] == [
        ("suspend", "otto", "10.1.2.3"), ("resume", "ada", "10.1.2.3")]
    later = call(app, "GET", f"/audit?after={lines[0]['id']}", "tok-a").text.splitlines()
    assert [json.loads(line)["verb"] for line in later] == ["resume"]


def test_the_trail_survives_a_restart_and_is_redacted(tmp_path: Path) -> None:
    from gitops.redaction import register_secret

    register_secret("hunter2-very-secret")
    History(tmp_path / "h.db").record_action(Action(at=1.0, actor="otto", via="token", peer="::1", verb="suspend",
                                                    reason="pw hunter2-very-secret leaked"))
    (row,) = History(tmp_path / "h.db").actions()
    assert row.actor == "otto" and "hunter2-very-secret" not in row.reason


def test_an_action_notification_names_its_actor() -> None:
    action = Action(at=1.0, actor="otto", via="token", peer="10.1.2.3", verb="rollback", detail="to abc1234",
                    reason="bad deploy")
    event = Event(EventKind.ACTION, None, "main", "Synced", (action.describe(),), actor="otto")
    assert describe(event) == "branch main: action: rollback (to abc1234) by otto from 10.1.2.3: bad deploy"
    assert event.to_json()["actor"] == "otto"
