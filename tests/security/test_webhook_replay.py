"""Replayed webhook deliveries (issue 11 row 14): refused, without draining the rate limit;
and (issue 50 row 13) after the agent restarts too, its log kept in the state dir."""

from __future__ import annotations

from pathlib import Path

from gitops.admin.webhooks import RateLimiter, sign
from gitops.commands.run import _delivery_log
from gitops.loop.statedir import prepare
from tests.support.admin import BODY, SECRET, FakeAgent, guard, request


def push(agent: FakeAgent, hook: object, body: bytes, delivery: str) -> int:
    headers = {"X-Hub-Signature-256": sign(SECRET, body), "X-GitHub-Delivery": delivery}
    return request(agent, "POST", "/hooks/git", webhook=hook, content=body, headers=headers).status_code


def test_a_replayed_delivery_is_409_and_fetches_nothing() -> None:
    agent = FakeAgent()
    hook = guard()
    assert push(agent, hook, BODY, "d-1") == 202
    assert push(agent, hook, BODY, "d-1") == 409
    assert agent.fetches == 1


def test_a_replay_under_a_fresh_delivery_id_is_still_409() -> None:
    # The id header is not signed; the body is.
    agent = FakeAgent()
    hook = guard()
    assert push(agent, hook, BODY, "d-1") == 202
    assert push(agent, hook, BODY, "d-forged") == 409
    assert agent.fetches == 1


def test_replays_do_not_use_up_the_rate_limit() -> None:
    agent = FakeAgent()
    hook = guard(limiter=RateLimiter(per_second=0.001, burst=2), clock=lambda: 0.0)
    assert push(agent, hook, BODY, "d-1") == 202
    assert [push(agent, hook, BODY, "d-1") for _ in range(5)] == [409] * 5
    other = BODY.replace(b"abc", b"def")
    assert push(agent, hook, other, "d-2") == 202
    assert agent.fetches == 2


def test_a_delivery_refused_by_the_rate_limit_can_be_redelivered() -> None:
    agent = FakeAgent()
    now = [0.0]
    hook = guard(limiter=RateLimiter(per_second=1.0, burst=1), clock=lambda: now[0])
    other = BODY.replace(b"abc", b"def")
    assert push(agent, hook, BODY, "d-1") == 202
    assert push(agent, hook, other, "d-2") == 429
    now[0] = 5.0
    assert push(agent, hook, other, "d-2") == 202
    assert agent.fetches == 2


def test_row13_a_delivery_replayed_after_a_restart_is_still_409(tmp_path: Path) -> None:
    # Issue 50, row 13: the replay log was memory only; it is kept in the state dir.
    state = prepare(tmp_path / "state")
    first = FakeAgent()
    assert push(first, guard(deliveries=_delivery_log(state.webhook_deliveries)), BODY, "d-1") == 202
    assert state.webhook_deliveries.stat().st_mode & 0o777 == 0o600
    restarted = FakeAgent()  # a new agent process: a new guard, the log read back from the state dir
    assert push(restarted, guard(deliveries=_delivery_log(state.webhook_deliveries)), BODY, "d-forged") == 409
    assert restarted.fetches == 0
    other = BODY.replace(b"abc", b"def")
    assert push(restarted, guard(deliveries=_delivery_log(state.webhook_deliveries)), other, "d-2") == 202


def test_row13_a_damaged_replay_log_keeps_only_keys_it_could_have_written(tmp_path: Path) -> None:
    path = tmp_path / "webhook-deliveries"
    path.write_text("body:" + "a" * 64 + "\nrm -rf /\n" + "x" * 5000 + "\n")
    log = _delivery_log(path)
    assert log.seen(None, b"nothing") is False
    assert list(log._seen) == ["body:" + "a" * 64]
