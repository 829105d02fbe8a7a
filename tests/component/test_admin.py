"""The admin API in-process (httpx ASGI transport) with a fake agent.

Requests go to `http://127.0.0.1` (an allowed Host); the hostile cases of
the access policy are in tests/security/test_admin_access.py.
"""

from __future__ import annotations

from gitops.admin.webhooks import RateLimiter, sign
from tests.support.admin import BODY, SECRET, FakeAgent, guard, request


def test_status_is_json_with_the_overall_status() -> None:
    response = request(FakeAgent(), "GET", "/status")
    assert response.status_code == 200 and response.json()["status"] == "Progressing"


def test_history_lists_entries() -> None:
    response = request(FakeAgent(), "GET", "/history")
    assert [e["commit"] for e in response.json()["entries"]] == ["c" * 40]


def test_history_limit_must_be_a_number() -> None:
    assert request(FakeAgent(), "GET", "/history?limit=x").status_code == 400


def test_metrics_are_served_in_prometheus_format() -> None:
    response = request(FakeAgent(), "GET", "/metrics")
    assert response.text == "gitops_x 1\n"


def test_healthz_answers() -> None:
    assert request(FakeAgent(), "GET", "/healthz").status_code == 200


def test_sync_wakes_the_agent() -> None:
    agent = FakeAgent()
    assert request(agent, "POST", "/sync").status_code == 202
    assert agent.syncs == 1


def test_sync_while_suspended_is_refused() -> None:
    agent = FakeAgent()
    agent.suspended = True
    response = request(agent, "POST", "/sync")
    assert response.status_code == 409 and "suspended" in response.json()["error"]
    assert agent.syncs == 0


def test_suspend_and_resume_switch_the_status() -> None:
    agent = FakeAgent()
    assert request(agent, "POST", "/suspend").json() == {"status": "Suspended"}
    assert request(agent, "POST", "/resume").json()["status"] != "Suspended"


def test_sync_needs_post() -> None:
    assert request(FakeAgent(), "GET", "/sync").status_code == 405


def test_webhook_with_a_valid_signature_triggers_a_fetch() -> None:
    agent = FakeAgent()
    response = request(agent, "POST", "/hooks/git", webhook=guard(), content=BODY,
                       headers={"X-Hub-Signature-256": sign(SECRET, BODY)})
    assert response.status_code == 202 and agent.fetches == 1


def test_webhook_without_a_signature_is_401_and_fetches_nothing() -> None:
    agent = FakeAgent()
    assert request(agent, "POST", "/hooks/git", webhook=guard(), content=BODY).status_code == 401
    assert agent.fetches == 0


def test_webhook_with_a_wrong_signature_is_403_and_fetches_nothing() -> None:
    agent = FakeAgent()
    response = request(agent, "POST", "/hooks/git", webhook=guard(), content=BODY,
                       headers={"X-Hub-Signature-256": sign(b"wrong", BODY)})
    assert response.status_code == 403 and agent.fetches == 0


def test_webhook_is_off_without_a_secret() -> None:
    agent = FakeAgent()
    response = request(agent, "POST", "/hooks/git", content=BODY,
                       headers={"X-Hub-Signature-256": sign(SECRET, BODY)})
    assert response.status_code == 404 and agent.fetches == 0


def test_webhook_body_over_the_limit_is_413() -> None:
    agent = FakeAgent()
    big = b"x" * 2048
    response = request(agent, "POST", "/hooks/git", webhook=guard(max_body=1024), content=big,
                       headers={"X-Hub-Signature-256": sign(SECRET, big)})
    assert response.status_code == 413 and agent.fetches == 0


def test_webhook_is_rate_limited() -> None:
    agent = FakeAgent()
    limited = guard(limiter=RateLimiter(per_second=0.001, burst=1), clock=lambda: 0.0)
    bodies = [BODY.replace(b"abc", sha) for sha in (b"a1", b"a2", b"a3")]  # three pushes, not one replayed
    codes = [
        request(agent, "POST", "/hooks/git", webhook=limited, content=body,
                headers={"X-Hub-Signature-256": sign(SECRET, body)}).status_code
        for body in bodies
    ]
    assert codes == [202, 429, 429] and agent.fetches == 1


def test_status_page_is_served_at_the_root() -> None:
    response = request(FakeAgent(), "GET", "/")
    assert response.status_code == 200 and "<html" in response.text
