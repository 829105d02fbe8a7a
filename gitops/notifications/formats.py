"""One event -> one provider's HTTP request, in the format that provider documents. Pure.

- webhook: the event as JSON; with a secret, `X-Signature: sha256=<hex>`,
  the HMAC-SHA256 of the body (Flux's generic-hmac).
- slack: an incoming-webhook message, `text` plus `blocks` (commit, result,
  first errors), user text escaped for Slack's mrkdwn.
- github: `POST {api}/repos/OWNER/REPO/statuses/SHA` with `state`,
  `context` = `ray-gitops/<namespace>`, a `description` of at most 140
  characters and `target_url` (the status page's history entry).
- gitlab: `POST {api}/projects/ID/statuses/SHA` with `state`, `name`,
  `description`, `target_url` and `ref`; `PRIVATE-TOKEN` header.

Commit statuses say nothing about events without a commit (git
unreachable): `request_for` returns None. Must not: send, log, or put a
secret anywhere but the request itself (`Request`'s repr hides URL and headers).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from gitops.notifications.config import GitHubProvider, GitLabProvider, Provider, SlackProvider, WebhookProvider
from gitops.notifications.events import CommitState, Event, describe, headline
from gitops.notifications.links import Links

__all__ = ["Request", "Context", "request_for", "GITHUB_API_VERSION", "DESCRIPTION_LIMIT", "SLACK_ERRORS_SHOWN"]

GITHUB_API_VERSION = "2022-11-28"
DESCRIPTION_LIMIT = 140  # GitHub's limit for a commit status description
SLACK_ERRORS_SHOWN = 5
_SLACK_TEXT_LIMIT = 3000  # a section block's text
_USER_AGENT = "ray-gitops"
# GitHub has no "running": an apply under way stays pending, its description says "applying".
_GITHUB_STATES = {
    CommitState.PENDING: "pending", CommitState.RUNNING: "pending", CommitState.SUCCESS: "success",
    CommitState.FAILURE: "failure", CommitState.ERROR: "error",
}
_GITLAB_STATES = {
    CommitState.PENDING: "pending", CommitState.RUNNING: "running", CommitState.SUCCESS: "success",
    CommitState.FAILURE: "failed", CommitState.ERROR: "canceled",
}


@dataclass(frozen=True)
class Request:
    """A POST to make; URL and headers may hold secrets, so repr leaves them out."""

    url: str = field(repr=False)
    headers: tuple[tuple[str, str], ...] = field(repr=False)
    body: bytes


@dataclass(frozen=True)
class Context:
    """What every request may mention besides the event."""

    namespace: str
    links: Links = Links()

    @property
    def name(self) -> str:
        return f"ray-gitops/{self.namespace}"


def request_for(provider: Provider, event: Event, context: Context) -> Request | None:
    if isinstance(provider, WebhookProvider):
        return _webhook(provider, event, context)
    if isinstance(provider, SlackProvider):
        return _slack(provider, event, context)
    if isinstance(provider, GitHubProvider):
        return _github(provider, event, context)
    return _gitlab(provider, event, context)


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def _links(event: Event, context: Context) -> dict[str, str | None]:
    sha = event.commit
    return {
        "commit_url": context.links.commit_url(sha) if sha else None,
        "history_url": context.links.history_url(sha) if sha else None,
    }


def _webhook(provider: WebhookProvider, event: Event, context: Context) -> Request:
    body = _json({**event.to_json(), "namespace": context.namespace, **_links(event, context)})
    headers = [("Content-Type", "application/json"), ("User-Agent", _USER_AGENT)]
    if provider.secret is not None:
        digest = hmac.new(provider.secret.get_secret_value().encode(), body, hashlib.sha256).hexdigest()
        headers.append(("X-Signature", f"sha256={digest}"))
    return Request(provider.url, tuple(headers), body)


def _mrkdwn(text: str) -> str:
    """Slack reads &, < and > as markup; user text must not be."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack(provider: SlackProvider, event: Event, context: Context) -> Request | None:
    if provider.url is None:
        return None
    links = _links(event, context)
    commit = "–"
    if event.commit:
        commit = f"<{links['commit_url']}|{event.commit[:7]}>" if links["commit_url"] else f"`{event.commit[:7]}`"
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{context.name}*: {_mrkdwn(describe(event))}"}},
        {"type": "section", "fields": [
            {"type": "mrkdwn", "text": f"*Commit*\n{commit}"},
            {"type": "mrkdwn", "text": f"*Result*\n{event.kind.value}"},
            {"type": "mrkdwn", "text": f"*Branch*\n{_mrkdwn(event.branch)}"},
            {"type": "mrkdwn", "text": f"*Status*\n{event.status}"},
        ]},
    ]
    if event.errors:
        shown = "\n".join(event.errors[:SLACK_ERRORS_SHOWN])
        more = len(event.errors) - SLACK_ERRORS_SHOWN
        text = _mrkdwn(shown)[: _SLACK_TEXT_LIMIT - 40] + (f"\n… and {more} more" if more > 0 else "")
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": f"```{text}```"}})
    if links["history_url"]:
        blocks.append({"type": "context", "elements": [
            {"type": "mrkdwn", "text": f"<{links['history_url']}|history entry on the status page>"},
        ]})
    body = _json({"text": f"{context.name}: {describe(event)}", "blocks": blocks})
    return Request(provider.url.get_secret_value(), (("Content-Type", "application/json"),), body)


def _description(event: Event) -> str:
    text = headline(event)
    return text if len(text) <= DESCRIPTION_LIMIT else text[: DESCRIPTION_LIMIT - 1] + "…"


def _github(provider: GitHubProvider, event: Event, context: Context) -> Request | None:
    if event.commit_state is None or event.commit is None or provider.token is None:
        return None
    body: dict[str, Any] = {
        "state": _GITHUB_STATES[event.commit_state],
        "context": context.name,
        "description": _description(event),
    }
    if (target := _links(event, context)["history_url"]) is not None:
        body["target_url"] = target
    headers = (
        ("Accept", "application/vnd.github+json"),
        ("Authorization", f"Bearer {provider.token.get_secret_value()}"),
        ("Content-Type", "application/json"),
        ("User-Agent", _USER_AGENT),
        ("X-GitHub-Api-Version", GITHUB_API_VERSION),
    )
    return Request(f"{provider.api_url}/repos/{provider.repository}/statuses/{event.commit}", headers, _json(body))


def _gitlab(provider: GitLabProvider, event: Event, context: Context) -> Request | None:
    if event.commit_state is None or event.commit is None or provider.token is None:
        return None
    body: dict[str, Any] = {
        "state": _GITLAB_STATES[event.commit_state],
        "name": context.name,
        "description": _description(event),
        "ref": event.branch,
    }
    if (target := _links(event, context)["history_url"]) is not None:
        body["target_url"] = target
    headers = (
        ("Content-Type", "application/json"),
        ("PRIVATE-TOKEN", provider.token.get_secret_value()),
        ("User-Agent", _USER_AGENT),
    )
    project = quote(str(provider.project), safe="")
    return Request(f"{provider.api_url}/projects/{project}/statuses/{event.commit}", headers, _json(body))
