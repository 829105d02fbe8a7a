"""The status page you can act from (issue 47 item 4), through the admin app.

In-process: the page's Content-Security-Policy and nonces, the buttons each
role gets (none for a viewer), the CSRF token bound to its reader (a forged
POST is 403 and changes nothing), the history filters, the pending plan.
Over real loopback HTTP (our edge server): the live stream's bounds, 16
streams in all and 4 a caller, a stream's end at its lifetime, its heartbeat,
a slot given back when a client leaves, and no token in what it sends.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import socket
import time
from pathlib import Path

import httpx

from gitops.admin.auth.access import AccessPolicy
from gitops.admin.api import build_app
from gitops.admin.auth.csrf import CsrfKey
from gitops.admin.events import EventLimits
from gitops.admin.auth.tokens import parse_tokens
from gitops.reconcile.plans import PendingPlan
from tests.support.admin import AuditedAgent
from tests.support.listeners import serving

TOKENS = {"vera": ("viewer", "tok-viewer-page-1"), "otto": ("operator", "tok-operator-page-2"),
          "ada": ("admin", "tok-admin-page-3")}
EXTRA = {f"op{i}": ("operator", f"tok-op{i}-page") for i in range(5)}  # callers enough to fill 16 streams
EXTRA["echo-ci"] = ("operator", "tok-echo-ci-page")  # scoped: endpoint=echo
ALL = {**TOKENS, **EXTRA}
PAGE_ORIGIN = {"Origin": "http://127.0.0.1"}
PLAN = PendingPlan("d" * 40, "held: sync window 'freeze' until 18:00",
                   '~ backend echo (restart)\n    version: "v1" → "v2"\n\n'
                   "Plan: 0 to create, 1 to update (1 restart), 0 to delete.\n")
SHORT = EventLimits(lifetime_s=0.2, poll_s=0.05)


def policy() -> AccessPolicy:
    table = parse_tokens("\n".join(f"{name} {role} {hashlib.sha256(tok.encode()).hexdigest()}"
                                   + (" endpoint=echo" if name == "echo-ci" else "")
                                   for name, (role, tok) in ALL.items()), "tokens")
    return AccessPolicy.build(None, "127.0.0.1", tokens=lambda: table)


class Rollouts:
    """A controller's answer to a rollout promoted or aborted by hand: echo's runs, no other."""

    def __init__(self) -> None:
        self.decided: list[tuple[str, str, str]] = []

    async def __call__(self, endpoint: str, verb: str, who: str) -> str:
        if endpoint != "echo" or self.decided:
            raise ValueError(f"endpoint {endpoint} has no rollout" if endpoint != "echo"
                             else "the rollout of endpoint echo is over (aborted)")
        self.decided.append((endpoint, verb, who))
        return f"endpoint echo: {verb} by hand by {who}"


def app_for(tmp_path: Path, events: EventLimits = SHORT, rollouts: Rollouts | None = None):
    agent = AuditedAgent(tmp_path / "history.db")
    app = build_app(agent, sync=lambda: None, webhook_fetch=lambda: None, metrics=lambda: (b"", "text/plain"),
                    policy=policy(), audit=agent, pending_plan=lambda: PLAN, events=events, csrf=CsrfKey(b"k" * 32),
                    decide_rollout=rollouts)
    return agent, app


def call(app, method: str, path: str, name: str | None, headers: dict[str, str] | None = None) -> httpx.Response:
    sent = {**({"Authorization": f"Bearer {ALL[name][1]}"} if name else {}), **(headers or {})}

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            return await client.request(method, path, headers=sent)

    return asyncio.run(go())


def csrf_of(page: str) -> str:
    return re.search(r'<meta name="gitops-csrf" content="([^"]*)">', page).group(1)


def test_the_page_has_a_strict_policy_and_a_fresh_nonce_on_each_script_and_style(tmp_path: Path) -> None:
    _, app = app_for(tmp_path)
    first, second = call(app, "GET", "/", "otto"), call(app, "GET", "/", "otto")
    nonces = []
    for response in (first, second):
        policy_header = response.headers["content-security-policy"]
        nonce = re.search(r"script-src 'nonce-([A-Za-z0-9_-]+)'", policy_header).group(1)
        assert "default-src 'self'" in policy_header and "frame-ancestors 'none'" in policy_header
        assert f"style-src 'nonce-{nonce}'" in policy_header and "unsafe-inline" not in policy_header
        tags = re.findall(r"<(script|style)\b([^>]*)>", response.text)
        assert len(tags) == 2 and all(attrs == f' nonce="{nonce}"' for _, attrs in tags), tags
        assert not re.search(r"\son[a-z]+\s*=", response.text)  # no inline handlers (the policy would block them)
        assert response.headers["x-frame-options"] == "DENY" and response.headers["cache-control"] == "no-store"
        nonces.append(nonce)
    assert nonces[0] != nonces[1] and len(nonces[0]) >= 16


def test_a_viewer_gets_no_action_and_an_operator_each_with_its_confirm(tmp_path: Path) -> None:
    _, app = app_for(tmp_path)
    viewer = call(app, "GET", "/", "vera").text
    assert "<button" not in viewer and '<form class="confirm"' not in viewer and "data-path" not in viewer
    assert "read-only: your role may take no action here" in viewer and "vera (viewer)" in viewer
    operator = call(app, "GET", "/", "otto").text
    for key in ("sync", "override", "suspend", "resume", "rollback"):
        assert f'id="act-{key}"' in operator and f'id="confirm-{key}"' in operator, key
    assert "otto (operator)" in operator
    assert "const READS_MISMATCHES = false" in operator  # the shadow sample is the admin's
    assert "const READS_MISMATCHES = true" in call(app, "GET", "/", "ada").text


def test_only_a_role_that_may_roll_back_gets_the_history_rows_roll_back_to(tmp_path: Path) -> None:
    _, app = app_for(tmp_path)
    viewer = call(app, "GET", "/", "vera").text
    assert 'id="confirm-rollback-to"' not in viewer and "rollback?commit=" not in viewer
    scoped = call(app, "GET", "/", "echo-ci").text  # an endpoint's operator may not roll the agent back
    assert 'id="confirm-rollback-to"' not in scoped
    for name in ("otto", "ada"):
        page = call(app, "GET", "/", name).text
        form = re.search(r'<form class="confirm" id="confirm-rollback-to" data-path="([^"]*)" hidden>(.*?)</form>',
                         page, re.S)
        assert form is not None and form.group(1) == "rollback?commit={commit}", name
        assert "Roll back to <span class=\"target\"></span>?" in form.group(2) and 'id="go-rollback-to"' in form.group(2)
        assert 'id="act-rollback-to"' not in page  # drawn by the page on each applied commit's row, not in the bar
        assert 'const APPLIED_RESULTS = ["applied", "noop", "step"];' in page
        assert 'document.getElementById("confirm-rollback-to")' in page


def test_a_rollback_to_a_chosen_commit_from_the_page_is_attributed(tmp_path: Path) -> None:
    agent, app = app_for(tmp_path)
    token = csrf_of(call(app, "GET", "/", "otto").text)
    done = call(app, "POST", "/rollback?commit=abc1234&reason=back%20to%20it", "otto",
                {**PAGE_ORIGIN, "X-CSRF-Token": token})
    assert done.status_code == 200, done.text
    assert done.json()["good"] == "abc1234"
    (row,) = agent.actions()
    assert (row.verb, row.actor, row.reason, row.detail) == ("rollback", "otto", "back to it", f"to abc1234, holding {'c' * 7}")


def test_no_token_is_in_the_page(tmp_path: Path) -> None:
    _, app = app_for(tmp_path)
    for name, (_, token) in TOKENS.items():
        page = call(app, "GET", "/", name).text
        assert token not in page and hashlib.sha256(token.encode()).hexdigest() not in page


def test_the_operators_page_token_acts_and_a_post_without_it_is_403(tmp_path: Path) -> None:
    agent, app = app_for(tmp_path)
    token = csrf_of(call(app, "GET", "/", "otto").text)
    forged = call(app, "POST", "/rollback?reason=x", "otto", PAGE_ORIGIN)
    assert forged.status_code == 403 and "X-CSRF-Token" in forged.json()["error"]
    someone_elses = csrf_of(call(app, "GET", "/", "op0").text)
    assert call(app, "POST", "/rollback", "otto", {**PAGE_ORIGIN, "X-CSRF-Token": someone_elses}).status_code == 403
    assert agent.actions() == []  # nothing happened, nothing recorded
    done = call(app, "POST", "/rollback?reason=from%20the%20page", "otto", {**PAGE_ORIGIN, "X-CSRF-Token": token})
    assert done.status_code == 200, done.text
    (row,) = agent.actions()
    assert (row.verb, row.actor, row.reason) == ("rollback", "otto", "from the page")
    # The CLI sends no Origin, no Sec-Fetch-* and no cookie: its bearer alone acts, as before.
    assert call(app, "POST", "/suspend", "otto").status_code == 200


def test_a_viewer_forging_the_post_with_its_own_page_token_is_403(tmp_path: Path) -> None:
    agent, app = app_for(tmp_path)
    token = csrf_of(call(app, "GET", "/", "vera").text)
    for path in ("/rollback", "/sync", "/suspend", "/resume", "/sync?override_window=1"):
        response = call(app, "POST", path, "vera", {**PAGE_ORIGIN, "X-CSRF-Token": token})
        assert response.status_code == 403 and "vera is viewer; this needs operator" in response.json()["error"], path
    assert agent.actions() == [] and not agent.suspended


def test_a_rollout_is_promoted_or_aborted_by_its_route_with_the_callers_name(tmp_path: Path) -> None:
    rollouts = Rollouts()
    agent, app = app_for(tmp_path, rollouts=rollouts)
    assert call(app, "POST", "/rollouts/echo/abort", "vera").status_code == 403
    other = call(app, "POST", "/rollouts/api/abort", "echo-ci")
    assert other.status_code == 403 and "scoped to endpoint echo" in other.json()["error"]
    token = csrf_of(call(app, "GET", "/", "echo-ci").text)
    done = call(app, "POST", "/rollouts/echo/abort?reason=p99", "echo-ci", {**PAGE_ORIGIN, "X-CSRF-Token": token})
    assert done.status_code == 200 and done.json()["message"] == "endpoint echo: abort by hand by echo-ci"
    assert rollouts.decided == [("echo", "abort", "echo-ci")]
    again = call(app, "POST", "/rollouts/echo/promote", "otto")
    assert again.status_code == 409 and "is over (aborted)" in again.json()["error"]
    rows = call(app, "GET", "/history?kind=abort", "vera").json()["actions"]
    assert [(r["actor"], r["reason"], r["result"]) for r in rows] == [("echo-ci", "p99", "accepted")]
    assert call(app, "GET", "/history?kind=promote", "vera").json()["actions"][0]["result"].startswith("refused: ")


def test_an_endpoint_scoped_readers_page_acts_on_its_rollout_only(tmp_path: Path) -> None:
    _, app = app_for(tmp_path)
    page = call(app, "GET", "/", "echo-ci").text
    assert 'id="confirm-abort"' in page and 'id="confirm-promote"' in page and 'id="act-sync"' not in page
    assert 'const ROLLOUT_SCOPE = "echo";' in page
    assert "const ROLLOUT_SCOPE = null;" in call(app, "GET", "/", "otto").text


def test_session_answers_the_same_token_as_the_page(tmp_path: Path) -> None:
    _, app = app_for(tmp_path)
    token = call(app, "GET", "/session", "otto").json()["csrf"]
    assert call(app, "POST", "/sync", "otto", {**PAGE_ORIGIN, "X-CSRF-Token": token}).status_code == 202


def test_history_filters_by_actor_and_kind(tmp_path: Path) -> None:
    _, app = app_for(tmp_path)
    call(app, "POST", "/suspend", "otto")
    call(app, "POST", "/resume", "ada")
    call(app, "POST", "/rollback", "otto")
    by_otto = call(app, "GET", "/history?actor=otto", "vera").json()
    assert [a["verb"] for a in by_otto["actions"]] == ["rollback", "suspend"] and by_otto["entries"] == []
    rollbacks = call(app, "GET", "/history?kind=rollback", "vera").json()
    assert [(a["verb"], a["actor"]) for a in rollbacks["actions"]] == [("rollback", "otto")]
    applied = call(app, "GET", "/history?kind=applied", "vera").json()
    assert [e["result"] for e in applied["entries"]] == ["applied"] and applied["actions"] == []
    bad = call(app, "GET", "/history?kind=nonsense", "vera")
    assert bad.status_code == 400 and "kind must be one of" in bad.json()["error"]


def test_the_pending_plan_is_served_as_diff_lines(tmp_path: Path) -> None:
    _, app = app_for(tmp_path)
    plan = call(app, "GET", "/plan", "vera").json()
    assert plan["commit"] == "d" * 40 and plan["why"].startswith("held: sync window")
    assert plan["lines"][:2] == [["~", "~ backend echo (restart)"], ["~", '    version: "v1" → "v2"']]


# --- the live stream over real HTTP ---------------------------------------------


def open_stream(port: int, name: str) -> tuple[socket.socket, int, bytes]:
    """A stream's connection, its status and what came with the head."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(f"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {ALL[name][1]}\r\n\r\n".encode())
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(65536)
        if not chunk:
            break
        received += chunk
    return sock, int(received.split(b" ", 2)[1]), received


def read_until(sock: socket.socket, marker: bytes, timeout_s: float, received: bytes = b"") -> bytes:
    deadline = time.monotonic() + timeout_s
    while marker not in received:
        assert time.monotonic() < deadline, f"no {marker!r} within {timeout_s} s: {received[-300:]!r}"
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        chunk = sock.recv(65536)
        if not chunk:
            break
        received += chunk
    return received


def test_streams_are_capped_at_16_and_4_a_caller_and_a_leaving_client_frees_its_slot(tmp_path: Path) -> None:
    limits = EventLimits(lifetime_s=30.0, heartbeat_s=5.0, poll_s=0.1)
    assert (limits.max_streams, limits.per_principal) == (16, 4)  # the defaults
    _, app = app_for(tmp_path, limits)
    opened: list[socket.socket] = []
    with serving(app) as port:
        try:
            for name in ("op0", "op1", "op2", "op3"):
                for _ in range(4):
                    sock, status, _ = open_stream(port, name)
                    opened.append(sock)
                    assert status == 200, name
            sock, status, head = open_stream(port, "op4")
            assert status == 503 and b"16 event streams are open already" in read_until(sock, b"}", 5, head)
            assert b"retry-after:" in head.lower()
            sock.close()
            opened[0].close()  # op0 leaves: its slot comes back
            deadline = time.monotonic() + 5
            while True:
                sock, status, _ = open_stream(port, "op4")
                opened.append(sock)
                if status == 200:
                    break
                assert time.monotonic() < deadline, "a closed stream's slot never came back"
                time.sleep(0.1)
            sock, status, head = open_stream(port, "op1")
            assert status == 503  # 16 again
            sock.close()
        finally:
            for sock in opened:
                sock.close()


def test_a_caller_gets_at_most_4_streams(tmp_path: Path) -> None:
    _, app = app_for(tmp_path, EventLimits(lifetime_s=30.0, poll_s=0.1))
    opened = []
    with serving(app) as port:
        try:
            for _ in range(4):
                sock, status, _ = open_stream(port, "otto")
                opened.append(sock)
                assert status == 200
            sock, status, head = open_stream(port, "otto")
            opened.append(sock)
            assert status == 503 and b"otto has 4 event streams open already" in read_until(sock, b"}", 5, head)
            sock, status, _ = open_stream(port, "ada")
            opened.append(sock)
            assert status == 200  # another caller is not held up by otto's
        finally:
            for sock in opened:
                sock.close()


def test_a_stream_sends_the_status_beats_and_ends_at_its_lifetime_with_no_token(tmp_path: Path) -> None:
    _, app = app_for(tmp_path, EventLimits(lifetime_s=1.5, heartbeat_s=0.3, poll_s=0.05))
    with serving(app) as port:
        started = time.monotonic()
        sock, status, head = open_stream(port, "otto")
        assert status == 200 and b"content-type: text/event-stream" in head.lower()
        received = read_until(sock, b"event: end", 10, head)
        lasted = time.monotonic() - started
        sock.close()
    assert 1.4 <= lasted < 4.0, lasted
    assert b"retry: 3000" in received and b": heartbeat" in received
    update = received.split(b"event: update\ndata: ", 1)[1].split(b"\n", 1)[0]
    assert b'"status":' in update and b'"plan":{"commit":"' + b"d" * 40 in update
    for _, token in ALL.values():
        assert token.encode() not in received


def test_a_stopping_listener_ends_its_streams_instead_of_waiting_out_its_grace(tmp_path: Path) -> None:
    _, app = app_for(tmp_path, EventLimits(lifetime_s=300.0))  # the default look, once a second
    stopping = serving(app)
    port = stopping.__enter__()
    sock, status, head = open_stream(port, "otto")
    assert status == 200
    read_until(sock, b"event: update", 5, head)
    started = time.monotonic()
    stopping.__exit__(None, None, None)
    took = time.monotonic() - started
    received = read_until(sock, b"event: end", 5)
    sock.close()
    assert took < 2.0, took  # the grace for answers in flight is 5 s
    assert b"event: end" in received
