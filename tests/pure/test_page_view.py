"""The status page's pure parts (issue 47 item 4): which buttons a reader gets (from the
role table), the history filters, the pending plan as diff lines, the CSRF token's
binding and lifetime, and one live stream's frames on a given clock."""

from __future__ import annotations

import asyncio

import pytest

from gitops.admin.auth.csrf import CSRF_LIFETIME_S, CsrfKey, from_browser
from gitops.admin.events import EventLimits, EventStreams, frames
from gitops.admin.page_view import (
    APPLIED_RESULTS, HISTORY_ACTIONS, HISTORY_KINDS, PAGE_ACTIONS, ROLLOUT_ACTIONS, actions_html,
    content_security_policy, filter_history, offered,
    plan_lines,
)
from gitops.admin.auth.roles import Principal, Role, Scope
from gitops.reconcile.outcomes import Action, HistoryEntry, Outcome

VIEWER = Principal("vera", Role.VIEWER)
OPERATOR = Principal("otto", Role.OPERATOR)
ADMIN = Principal("ada", Role.ADMIN)


def keys(principal: Principal, environment: str | None = None) -> list[str]:
    return [action.key for action in offered(principal, environment)]


def test_a_viewer_is_offered_no_action_and_an_operator_every_one() -> None:
    assert keys(VIEWER) == [] and actions_html(offered(VIEWER, None)) == ""
    every = [action.key for action in (*PAGE_ACTIONS, *ROLLOUT_ACTIONS, *HISTORY_ACTIONS)]
    assert keys(OPERATOR) == every == keys(ADMIN) == [
        "sync", "override", "suspend", "resume", "rollback", "promote", "abort", "rollback-to"]


def test_a_scope_the_role_table_narrows_takes_the_buttons_away() -> None:
    endpoint_only = Principal("ci", Role.OPERATOR, Scope("endpoint", "echo"))
    assert keys(endpoint_only) == ["promote", "abort"]  # only a rollout's verbs name an endpoint (the page: echo's)
    prod_only = Principal("ci", Role.OPERATOR, Scope("environment", "prod"))
    assert keys(prod_only, "prod") == keys(OPERATOR) and keys(prod_only, "staging") == []


def test_each_button_posts_to_the_route_the_cli_uses_and_only_after_its_confirm() -> None:
    markup = actions_html(offered(OPERATOR, None))
    every = (*PAGE_ACTIONS, *ROLLOUT_ACTIONS, *HISTORY_ACTIONS)
    for action in every:
        assert f'id="confirm-{action.key}"' in markup and f'data-path="{action.path}"' in markup
        # The agent's buttons are in the bar; a rollout's and a commit's are drawn on their rows by the page.
        assert (f'id="act-{action.key}"' in markup) is not action.on_row
    assert markup.count("<form") == len(every) == markup.count(" hidden>")
    assert "onclick" not in markup and "<script" not in markup
    assert {action.route for action in every} == {
        "/sync", "/suspend", "/resume", "/rollback", "/rollouts/{endpoint}/promote", "/rollouts/{endpoint}/abort"}


def test_a_history_rows_rollback_names_its_commit_to_the_cli_route() -> None:
    (to_this,) = HISTORY_ACTIONS
    assert (to_this.path, to_this.route, to_this.on_history, to_this.on_rollout) == (
        "rollback?commit={commit}", "/rollback", True, False)
    markup = actions_html((to_this,))
    assert '<strong>Roll back to <span class="target"></span>?</strong>' in markup
    assert set(APPLIED_RESULTS) == {"applied", "noop", "step"}  # what `gitops rollback COMMIT` accepts


def test_the_policy_allows_only_the_nonced_scripts_and_no_framing() -> None:
    policy = content_security_policy("abc")
    assert "default-src 'self'" in policy and "script-src 'nonce-abc'" in policy
    assert "frame-ancestors 'none'" in policy and "unsafe-inline" not in policy and "unsafe-eval" not in policy


def entry(commit: str, result: Outcome) -> HistoryEntry:
    return HistoryEntry(commit=commit, branch="main", author_time=1.0, summary="s", started_at=1.0,
                        finished_at=2.0, result=result)


def action(actor: str, verb: str) -> Action:
    return Action(at=1.0, actor=actor, via="token", peer="127.0.0.1", verb=verb)


ENTRIES = [entry("a" * 40, Outcome.APPLIED), entry("b" * 40, Outcome.FAILED), entry("c" * 40, Outcome.APPLIED)]
ACTIONS = [action("otto", "rollback"), action("ada", "suspend"), action("otto", "sync")]


def test_history_by_actor_is_that_callers_actions_only() -> None:
    entries, actions = filter_history(ENTRIES, ACTIONS, actor="otto", kind=None, limit=50)
    assert entries == [] and [a.verb for a in actions] == ["rollback", "sync"]


def test_history_by_kind_is_a_commit_outcome_or_an_actions_verb() -> None:
    entries, actions = filter_history(ENTRIES, ACTIONS, actor=None, kind="applied", limit=50)
    assert [e.commit[0] for e in entries] == ["a", "c"] and actions == []
    entries, actions = filter_history(ENTRIES, ACTIONS, actor=None, kind="rollback", limit=50)
    assert entries == [] and [(a.actor, a.verb) for a in actions] == [("otto", "rollback")]
    entries, actions = filter_history(ENTRIES, ACTIONS, actor="ada", kind="rollback", limit=50)
    assert entries == [] and actions == []
    assert filter_history(ENTRIES, ACTIONS, actor=None, kind="applied", limit=1)[0] == ENTRIES[:1]
    with pytest.raises(ValueError, match="kind must be one of applied"):
        filter_history(ENTRIES, ACTIONS, actor=None, kind="deleted", limit=50)
    assert "rollback" in HISTORY_KINDS and "aborted" in HISTORY_KINDS


def test_a_plans_text_becomes_signed_diff_lines() -> None:
    text = ("+ backend echo-v2\n    version: \"v2\"\n~ endpoint echo\n    traffic: {\"a\": 1} → {\"b\": 1}\n"
            "- backend old\n\nPlan: 1 to create, 1 to update, 1 to delete.\n")
    assert plan_lines(text) == [
        ("+", "+ backend echo-v2"), ("+", '    version: "v2"'), ("~", "~ endpoint echo"),
        ("~", '    traffic: {"a": 1} → {"b": 1}'), ("-", "- backend old"), ("", ""),
        ("", "Plan: 1 to create, 1 to update, 1 to delete."),
    ]


def test_a_csrf_token_holds_for_its_principal_only_and_for_8_hours() -> None:
    now = [1_000_000.0]
    key = CsrfKey(b"k" * 32, clock=lambda: now[0])
    token = key.token(OPERATOR)
    assert key.valid(OPERATOR, token)
    assert not key.valid(VIEWER, token) and not key.valid(Principal("otto", Role.ADMIN), token)
    assert not key.valid(Principal("otto", Role.OPERATOR, via="oidc"), token)
    assert not CsrfKey(b"j" * 32, clock=lambda: now[0]).valid(OPERATOR, token)  # another agent start
    for bad in (None, "", "x", token.split(".")[0], "." + token.split(".")[1], token + "0"):
        assert not key.valid(OPERATOR, bad), bad
    now[0] += CSRF_LIFETIME_S
    assert key.valid(OPERATOR, token)
    now[0] += 1
    assert not key.valid(OPERATOR, token)


def test_only_browsers_headers_make_a_request_a_browsers() -> None:
    assert not from_browser({"authorization": "Bearer x", "host": "127.0.0.1", "user-agent": "python-httpx"})
    for name in ("origin", "sec-fetch-site", "cookie"):
        assert from_browser({name: "x"})


def test_the_stream_caps_in_all_and_per_caller() -> None:
    streams = EventStreams(EventLimits(max_streams=3, per_principal=2))
    assert streams.acquire("a") is None and streams.acquire("a") is None
    assert streams.acquire("a") == "a has 2 event streams open already"
    assert streams.acquire("b") is None
    assert streams.acquire("c") == "3 event streams are open already"
    streams.release("a")
    assert streams.acquire("c") is None and streams.open == 3
    assert EventLimits() == EventLimits(max_streams=16, per_principal=4, lifetime_s=300.0, heartbeat_s=15.0,
                                        poll_s=1.0, retry_ms=3000)


def test_a_stream_sends_changes_heartbeats_and_ends_at_its_lifetime() -> None:
    clock = [0.0]
    seen = iter([{"v": 1}, {"v": 1}, {"v": 2}] + [{"v": 2}] * 100)

    def snapshot() -> dict:
        clock[0] += 5.0  # each look is 5 s of the stream's life
        return next(seen)

    async def run() -> list[bytes]:
        limits = EventLimits(lifetime_s=40.0, heartbeat_s=15.0, poll_s=0.0)
        return [chunk async for chunk in frames(snapshot, limits, clock=lambda: clock[0])]

    out = asyncio.run(run())
    assert out[0] == b"retry: 3000\n\n"
    assert [c for c in out if c.startswith(b"event: update")] == [
        b'event: update\ndata: {"v":1}\n\n', b'event: update\ndata: {"v":2}\n\n']
    assert out.count(b": heartbeat\n\n") == 1  # 15 s after the last change, then the stream ends at 40 s
    assert out[-1].startswith(b"event: end\n") and len(out) == 5
