"""A stand-in agent behind the admin API, and requests to it, for the admin, CLI and security tests.

Moved out of tests/component/test_admin.py, whose tests use them too."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from gitops.admin.auth.access import ANONYMOUS, AccessPolicy
from gitops.admin.auth.csrf import CsrfKey
from gitops.admin.api import WebhookGuard, build_app
from pathlib import Path

from gitops.loop.history import History
from gitops.reconcile.outcomes import Action, HistoryEntry, Outcome
from gitops.reconcile.rollback import Quarantine, RollbackReason, RollbackRefused
from gitops.status.rollup import StatusFacts, roll_up

SECRET = b"hook-secret"

BODY = b'{"ref": "refs/heads/main", "after": "abc"}'

class FakeAgent:
    def __init__(self) -> None:
        self.suspended = False
        self.syncs = 0
        self.fetches = 0

    def status(self):
        return roll_up(StatusFacts(repo="/r", branch="main", path="deployments", suspended=self.suspended))

    def history(self, limit: int = 50) -> list[HistoryEntry]:
        entry = HistoryEntry(commit="c" * 40, branch="main", author_time=1.0, summary="s", started_at=2.0,
                             finished_at=3.0, result=Outcome.APPLIED)
        return [entry][:limit]

    def suspend(self) -> None:
        self.suspended = True

    def resume(self) -> None:
        self.suspended = False

    def rollback(self, commit: str | None = None) -> Quarantine:
        if commit == "0000000":
            raise RollbackRefused("commit 0000000 was never applied here")
        return Quarantine(good=commit or "b" * 40, held=frozenset({"c" * 40}), reason=RollbackReason.MANUAL)

class AuditedAgent(FakeAgent):
    """The stand-in agent with a real ledger for its audit trail (`gitops.admin.api.AuditTrail`)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.ledger = History(path)

    def record_action(self, action: Action) -> Action:
        return self.ledger.record_action(action)

    def actions(self, limit: int = 50, actor: str | None = None, after: int = 0) -> list[Action]:
        return self.ledger.actions(limit, actor, after)

LOOPBACK_ONLY = AccessPolicy.build(None, "127.0.0.1")
PAGE_CSRF = CsrfKey(b"k" * 32)  # one key for every app `request` builds: a page's token outlives one call
ANONYMOUS_PAGE = {"X-CSRF-Token": PAGE_CSRF.token(ANONYMOUS)}  # the loopback page's token, no credentials set

def request(agent: FakeAgent, method: str, path: str, webhook: WebhookGuard | None = None,
            policy: AccessPolicy = LOOPBACK_ONLY, **kwargs: Any) -> httpx.Response:
    def sync() -> None:
        agent.syncs += 1

    def fetch() -> None:
        agent.fetches += 1

    app = build_app(agent, sync=sync, webhook_fetch=fetch, metrics=lambda: (b"gitops_x 1\n", "text/plain"),
                    webhook=webhook, policy=policy, csrf=PAGE_CSRF)

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            return await client.request(method, path, **kwargs)

    return asyncio.run(go())

def guard(**options: Any) -> WebhookGuard:
    return WebhookGuard(SECRET, **options)
