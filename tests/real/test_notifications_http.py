"""Notifications on the wire: real HTTP receivers on loopback check each
provider's documented request format, retries, the queue bound, and that a
hanging receiver slows neither other providers nor the reconcile loop."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
from pathlib import Path
from typing import Any, Callable

import pytest
from pydantic import SecretStr

from gitops.loop.agent import Agent, AgentSettings
from gitops.loop.history import History
from gitops.loop.metrics import AgentMetrics
from gitops.notifications.config import Channel, GitHubProvider, GitLabProvider, SlackProvider, WebhookProvider
from gitops.notifications.delivering import HttpSender, Notifier, RetryPolicy
from gitops.notifications.events import Event, EventKind
from gitops.notifications.formats import GITHUB_API_VERSION, Context
from gitops.notifications.links import Links
from gitops.reconcile.outcomes import Outcome
from gitops.reconcile.planner import plan
from gitops.sources.repos import GitSource
from gitops.specs.loading import Loader
from gitops.testing import FakeController
from tests.conftest import GitRepo
from tests.real.test_agent_loop import APP, spec
from tests.support.receivers import Receiver

pytestmark = pytest.mark.real

SHA = "3f2a9c1" + "e" * 33
ERRORS = tuple(f"deployments/echo.toml:{line}:1: backends.echo.num_replicas: must be >= 0 (got -1)" for line in range(1, 8))
INVALID = Event(EventKind.INVALID, SHA, "main", "Failed", ERRORS)
LINKS = Links(public_url="https://gitops.example.com", commit_url_template="https://forge.example.com/c/{sha}")
CONTEXT = Context("team-a", LINKS)
FAST = RetryPolicy(attempts=3, base_s=0.01, cap_s=0.05)


def webhook(url: str, secret: str | None = None, name: str = "hook") -> Channel:
    return Channel(name, WebhookProvider(type="webhook", url=url, secret=SecretStr(secret) if secret else None))


async def until(done: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not done():
        assert asyncio.get_running_loop().time() < deadline, "not reached in time"
        await asyncio.sleep(0.01)


def deliver(channels: list[Channel], events: list[Event], done: Callable[[Notifier], bool], **options: Any) -> Notifier:
    """Publish `events`, run the delivery task until `done`, then stop it."""

    async def scenario() -> Notifier:
        sender = HttpSender(timeout_s=5)
        notifier = Notifier(channels, CONTEXT, send=sender, **{"retry": FAST, **options})
        task = asyncio.create_task(notifier.run())
        for event in events:
            notifier.publish(event)
        try:
            await until(lambda: done(notifier))
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await sender.aclose()
        return notifier

    return asyncio.run(scenario())


def delivered(name: str, count: int = 1) -> Callable[[Notifier], bool]:
    return lambda notifier: notifier.health()[name]["delivered"] >= count


# --- each provider's documented format -----------------------------------------------


def test_webhook_posts_the_event_as_json_signed_like_flux_generic_hmac() -> None:
    with Receiver() as receiver:
        deliver([webhook(receiver.url + "/hooks/gitops", secret="hmac-key")], [INVALID], delivered("hook"))
    (request,) = receiver.requests
    expected = hmac.new(b"hmac-key", request.body, hashlib.sha256).hexdigest()
    assert (request.method, request.path) == ("POST", "/hooks/gitops")
    assert request.headers["content-type"] == "application/json"
    assert request.headers["x-signature"] == f"sha256={expected}"
    assert request.json() == {
        "event": "invalid",
        "commit": SHA,
        "branch": "main",
        "status": "Failed",
        "namespace": "team-a",
        "errors": list(ERRORS),
        "message": f"3f2a9c1 on main: invalid, nothing changed: {ERRORS[0]} (and 6 more)",
        "commit_url": f"https://forge.example.com/c/{SHA}",
        "history_url": f"https://gitops.example.com/#commit-{SHA}",
        "actor": None,  # the agent's own event: no person asked for it
    }


def test_webhook_without_a_secret_is_sent_unsigned() -> None:
    with Receiver() as receiver:
        deliver([webhook(receiver.url)], [INVALID], delivered("hook"))
    assert "x-signature" not in receiver.requests[0].headers


def test_slack_gets_text_and_blocks_with_the_commit_the_result_and_the_first_errors() -> None:
    with Receiver() as receiver:
        channel = Channel("chat", SlackProvider(type="slack", url=SecretStr(receiver.url + "/services/T0/B0/XYZ")))
        deliver([channel], [INVALID], delivered("chat"))
    (request,) = receiver.requests
    assert (request.path, request.headers["content-type"]) == ("/services/T0/B0/XYZ", "application/json")
    message = request.json()
    assert message["text"] == f"ray-gitops/team-a: 3f2a9c1 on main: invalid, nothing changed: {ERRORS[0]} (and 6 more)"
    headline, facts, errors, context = message["blocks"]
    assert headline["type"] == "section" and headline["text"]["type"] == "mrkdwn"
    assert [field["text"] for field in facts["fields"]] == [
        f"*Commit*\n<https://forge.example.com/c/{SHA}|3f2a9c1>",
        "*Result*\ninvalid",
        "*Branch*\nmain",
        "*Status*\nFailed",
    ]
    shown = "\n".join(error.replace(">", "&gt;") for error in ERRORS[:5])  # Slack's mrkdwn escape
    assert errors["text"]["text"] == f"```{shown}\n… and 2 more```"
    assert context == {
        "type": "context",
        "elements": [{"type": "mrkdwn", "text": f"<https://gitops.example.com/#commit-{SHA}|history entry on the status page>"}],
    }


def test_github_commit_status_follows_the_rest_api() -> None:
    with Receiver() as receiver:
        provider = GitHubProvider(
            type="github", repository="you/specs", token=SecretStr("ghp_token"), api_url=receiver.url + "/api/v3"
        )
        deliver([Channel("gh", provider)], [INVALID], delivered("gh"))
    (request,) = receiver.requests
    assert request.path == f"/api/v3/repos/you/specs/statuses/{SHA}"
    assert request.headers["authorization"] == "Bearer ghp_token"
    assert request.headers["accept"] == "application/vnd.github+json"
    assert request.headers["x-github-api-version"] == GITHUB_API_VERSION
    status = request.json()
    assert set(status) == {"state", "context", "description", "target_url"}
    assert (status["state"], status["context"]) == ("failure", "ray-gitops/team-a")
    assert status["description"].startswith(f"invalid, nothing changed: {ERRORS[0]}")
    assert len(status["description"]) <= 140
    assert status["target_url"] == f"https://gitops.example.com/#commit-{SHA}"


def test_gitlab_commit_status_follows_the_rest_api() -> None:
    with Receiver() as receiver:
        provider = GitLabProvider(
            type="gitlab", project="group/specs", token=SecretStr("glpat-token"), api_url=receiver.url + "/api/v4"
        )
        deliver([Channel("gl", provider)], [INVALID], delivered("gl"))
    (request,) = receiver.requests
    assert request.path == f"/api/v4/projects/group%2Fspecs/statuses/{SHA}"
    assert request.headers["private-token"] == "glpat-token"
    status = request.json()
    assert (status["state"], status["name"], status["ref"]) == ("failed", "ray-gitops/team-a", "main")
    assert status["description"].startswith("invalid, nothing changed: ")
    assert status["target_url"] == f"https://gitops.example.com/#commit-{SHA}"


PROGRESS = [Event(EventKind.SEEN, SHA, "main", "Progressing"), Event(EventKind.APPLYING, SHA, "main", "Progressing"),
            Event(EventKind.APPLIED, SHA, "main", "Synced")]


def test_github_commit_status_is_pending_when_seen_and_while_applying_then_success() -> None:
    with Receiver() as receiver:
        provider = GitHubProvider(
            type="github", repository="you/specs", token=SecretStr("ghp_token"), api_url=receiver.url + "/api/v3"
        )
        deliver([Channel("gh", provider)], PROGRESS, delivered("gh", 3))
    states = [(r.json()["state"], r.json()["description"]) for r in receiver.requests]
    assert states == [("pending", "noticed, waiting to be applied"), ("pending", "applying"), ("success", "applied")]
    assert {r.path for r in receiver.requests} == {f"/api/v3/repos/you/specs/statuses/{SHA}"}


def test_gitlab_commit_status_is_pending_when_seen_running_while_applying_then_success() -> None:
    with Receiver() as receiver:
        provider = GitLabProvider(
            type="gitlab", project=42, token=SecretStr("glpat-token"), api_url=receiver.url + "/api/v4"
        )
        deliver([Channel("gl", provider)], PROGRESS, delivered("gl", 3))
    assert [r.json()["state"] for r in receiver.requests] == ["pending", "running", "success"]
    assert {r.path for r in receiver.requests} == {f"/api/v4/projects/42/statuses/{SHA}"}


def test_rolled_back_and_quarantined_commits_reach_a_webhook_with_the_reason() -> None:
    rolled = Event(EventKind.ROLLED_BACK, SHA, "main", "Progressing", ("back to 1111111 (apply_failed)",))
    held = Event(EventKind.COMMIT_QUARANTINED, "2" * 40, "main", "Progressing", ("held back with 3f2a9c1 (apply_failed)",))
    with Receiver() as receiver:
        deliver([webhook(receiver.url + "/hook")], [rolled, held], delivered("hook", 2))
    bodies = [r.json() for r in receiver.requests]
    assert [(b["event"], b["commit"]) for b in bodies] == [("rolled_back", SHA), ("commit_quarantined", "2" * 40)]
    assert bodies[0]["message"] == "3f2a9c1 on main: rolled back: back to 1111111 (apply_failed)"


# --- delivery ----------------------------------------------------------------------------


def test_a_500_is_retried_with_growing_backoff_until_delivered() -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    results: list[tuple[str, str]] = []
    with Receiver(answers=(500, 503)) as receiver:
        deliver([webhook(receiver.url)], [INVALID], delivered("hook"), sleep=sleep, draw=lambda: 1.0,
                on_result=lambda provider, result: results.append((provider, result)))
    assert len(receiver.requests) == 3
    assert len({request.body for request in receiver.requests}) == 1
    assert waits == [0.01, 0.02]
    assert results == [("hook", "success")]


def test_giving_up_after_the_last_attempt_shows_in_health_without_secrets(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gitops.notifications")
    with Receiver(answers=(502, 502, 502)) as receiver:
        channel = Channel("chat", SlackProvider(type="slack", url=SecretStr(receiver.url + "/services/T0/B0/SECRET")))
        notifier = deliver([channel], [INVALID], lambda n: n.health()["chat"]["failed"] == 1)
    health = notifier.health()["chat"]
    assert len(receiver.requests) == FAST.attempts
    assert health["last_failure"]["error"] == "HTTP 502"
    assert (health["last_failure"]["event"], health["last_failure"]["commit"]) == ("invalid", SHA)
    assert "SECRET" not in json.dumps(health) and "SECRET" not in caplog.text
    assert "chat: invalid not delivered (HTTP 502)" in caplog.text


def test_a_refusal_is_not_retried() -> None:
    with Receiver(answers=(401,)) as receiver:
        notifier = deliver([webhook(receiver.url)], [INVALID], lambda n: n.health()["hook"]["failed"] == 1)
    assert len(receiver.requests) == 1
    assert notifier.health()["hook"]["last_failure"]["error"] == "HTTP 401"


def test_an_unreachable_receiver_is_described_by_the_error_type_only() -> None:
    with Receiver() as receiver:
        url = receiver.url  # the port is closed once the receiver stops
    notifier = deliver([webhook(url)], [INVALID], lambda n: n.health()["hook"]["failed"] == 1)
    assert notifier.health()["hook"]["last_failure"]["error"] == "ConnectError"


def test_a_full_queue_drops_the_oldest_messages_and_counts_them(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gitops.notifications")
    events = [Event(EventKind.APPLIED, f"{n:040d}", "main", "Synced") for n in range(5)]
    results: list[str] = []
    with Receiver() as receiver:
        async def scenario() -> Notifier:
            sender = HttpSender(timeout_s=5)
            notifier = Notifier([webhook(receiver.url)], CONTEXT, send=sender, queue_size=2,
                                on_result=lambda provider, result: results.append(result))
            for event in events:  # published before delivery starts: the queue fills
                notifier.publish(event)
            task = asyncio.create_task(notifier.run())
            await until(lambda: notifier.health()["hook"]["delivered"] == 2)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await sender.aclose()
            return notifier

        notifier = asyncio.run(scenario())
    assert [request.json()["commit"] for request in receiver.requests] == [events[3].commit, events[4].commit]
    assert notifier.health()["hook"]["dropped"] == 3
    assert results == ["dropped"] * 3 + ["success"] * 2
    assert [record.getMessage() for record in caplog.records] == [
        "notifications: hook: queue full, dropping the oldest messages"  # once, not once per message
    ]


def test_a_hanging_receiver_delays_only_its_own_provider() -> None:
    with Receiver() as stuck, Receiver() as healthy:
        stuck.hang()
        deliver([webhook(stuck.url, name="stuck"), webhook(healthy.url, name="healthy")], [INVALID],
                delivered("healthy"))
        # The stuck one has its request (both were sent at once; under load it may land after
        # the healthy one was answered), and is still holding it.
        stuck.wait_for(1)
        assert len(stuck.requests) == 1 and len(healthy.requests) == 1


def test_draining_at_shutdown_sends_what_is_queued() -> None:
    async def scenario(receiver: Receiver) -> None:
        sender = HttpSender(timeout_s=5)
        notifier = Notifier([webhook(receiver.url)], CONTEXT, send=sender)
        task = asyncio.create_task(notifier.run())
        notifier.publish(INVALID)
        await notifier.drain(10)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await sender.aclose()

    with Receiver() as receiver:
        asyncio.run(scenario(receiver))
        assert [request.json()["event"] for request in receiver.requests] == ["invalid"]


def test_draining_gives_up_on_a_hanging_receiver_after_its_time() -> None:
    async def scenario(receiver: Receiver) -> bool:
        sender = HttpSender(timeout_s=30)
        notifier = Notifier([webhook(receiver.url)], CONTEXT, send=sender)
        task = asyncio.create_task(notifier.run())
        notifier.publish(INVALID)
        await until(lambda: len(receiver.requests) == 1)
        await notifier.drain(0.2)  # returns although the receiver still holds the request
        still_held = notifier.health()["hook"]["delivered"] == 0
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await sender.aclose()
        return still_held

    with Receiver() as receiver:
        receiver.hang()
        assert asyncio.run(scenario(receiver))


def test_a_reconcile_tick_never_waits_for_a_hanging_receiver(repo: GitRepo, tmp_path: Path) -> None:
    repo.write("deployments/__init__.py", "")
    repo.write("deployments/apps/__init__.py", "")
    repo.write("deployments/apps/echo.py", APP)
    repo.write("deployments/echo.toml", spec({"v1": 1.0}))
    repo.commit("v1")
    metrics = AgentMetrics()

    async def scenario(receiver: Receiver) -> tuple[Outcome, int]:
        sender = HttpSender(timeout_s=30)
        notifier = Notifier([webhook(receiver.url)], CONTEXT, send=sender, on_result=metrics.notification_finished)
        loader = Loader()
        agent = Agent(
            GitSource(str(repo.root), None, tmp_path / "state"), FakeController(),
            History(tmp_path / "state" / "history.db"),
            load=loader.load_tree, plan=plan,
            metrics=metrics, settings=AgentSettings(watch=False), notifier=notifier,
        )
        delivery = asyncio.create_task(notifier.run())
        await agent.tick()  # applied: its notification reaches the receiver, which hangs
        await until(lambda: len(receiver.requests) == 1)
        repo.write("deployments/echo.toml", "[backends.v1]\n")
        repo.commit("broken")
        entry = await agent.tick(full=False)  # must end while the first delivery still hangs
        in_flight = len(receiver.requests)
        receiver.release()
        await until(lambda: notifier.health()["hook"]["delivered"] == 2)
        delivery.cancel()
        await asyncio.gather(delivery, return_exceptions=True)
        await sender.aclose()
        assert agent.status().model_dump(mode="json")["notifications"]["hook"]["delivered"] == 2
        return entry.result, in_flight

    with Receiver() as receiver:
        receiver.hang()
        result, in_flight = asyncio.run(scenario(receiver))
    assert (result, in_flight) == (Outcome.INVALID, 1)
    assert [request.json()["event"] for request in receiver.requests] == ["applied", "invalid"]
    assert 'gitops_notifications_total{provider="hook",result="success"} 2.0' in metrics.render().decode()
