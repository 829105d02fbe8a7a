"""What each provider's request says about an event (`gitops.notifications.formats`).

The wire format itself (paths, headers, signature) is checked on a real
receiver in tests/real/test_notifications_http.py; here: the choices.
"""

from __future__ import annotations

import json

import pytest
from pydantic import SecretStr

from gitops.notifications.config import GitHubProvider, GitLabProvider, SlackProvider
from gitops.notifications.events import Event, EventKind
from gitops.notifications.formats import DESCRIPTION_LIMIT, Context, request_for

SHA = "3f2a9c1" + "0" * 33
GITHUB = GitHubProvider(type="github", repository="you/specs", token=SecretStr("ghp_secret"))
GITLAB = GitLabProvider(type="gitlab", project="group/specs", token=SecretStr("glpat_secret"))
SLACK = SlackProvider(type="slack", url=SecretStr("https://hooks.slack.com/services/T/B/SECRET"))
CONTEXT = Context("team-a")


def event(kind: EventKind, *errors: str, commit: str | None = SHA) -> Event:
    return Event(kind, commit, "main", "Failed", errors)


def body(provider: object, sent: Event) -> dict:
    request = request_for(provider, sent, CONTEXT)  # type: ignore[arg-type]  # a provider the formats do not know, on purpose
    assert request is not None
    return json.loads(request.body)


@pytest.mark.parametrize(
    "kind, github, gitlab",
    [
        (EventKind.APPLIED, "success", "success"),
        (EventKind.SYNCED, "success", "success"),
        (EventKind.INVALID, "failure", "failed"),
        (EventKind.APPLY_FAILED, "failure", "failed"),
        (EventKind.ROLLOUT_ABORTED, "failure", "failed"),
        (EventKind.ROLLED_BACK, "failure", "failed"),
        (EventKind.COMMIT_QUARANTINED, "error", "canceled"),
    ],
)
def test_each_event_maps_to_the_forges_commit_state(kind: EventKind, github: str, gitlab: str) -> None:
    assert body(GITHUB, event(kind))["state"] == github
    assert body(GITLAB, event(kind))["state"] == gitlab


def test_git_unreachable_sets_no_commit_status() -> None:
    unreachable = event(EventKind.GIT_UNREACHABLE, "git fetch: refused", commit=None)
    assert request_for(GITHUB, unreachable, CONTEXT) is None
    assert request_for(GITLAB, unreachable, CONTEXT) is None


def test_the_status_description_holds_the_first_error_within_140_characters() -> None:
    description = body(GITHUB, event(EventKind.INVALID, "deployments/echo.toml:4:1: " + "x" * 200))["description"]
    assert len(description) == DESCRIPTION_LIMIT
    assert description.startswith("invalid, nothing changed: deployments/echo.toml:4:1: x")
    assert description.endswith("…")


def test_the_status_context_names_the_namespace() -> None:
    assert body(GITHUB, event(EventKind.APPLIED))["context"] == "ray-gitops/team-a"
    assert body(GITLAB, event(EventKind.APPLIED))["name"] == "ray-gitops/team-a"


def test_slack_text_is_escaped_so_errors_cannot_add_markup() -> None:
    blocks = body(SLACK, event(EventKind.INVALID, "a.toml:1:1: <!channel> & <b>"))["blocks"]
    errors = blocks[-1]["text"]["text"]
    assert errors == "```a.toml:1:1: &lt;!channel&gt; &amp; &lt;b&gt;```"


def test_a_requests_repr_hides_its_url_and_headers() -> None:
    shown = repr(request_for(SLACK, event(EventKind.APPLIED), CONTEXT)) + repr(
        request_for(GITHUB, event(EventKind.APPLIED), CONTEXT)
    )
    assert "SECRET" not in shown and "ghp_secret" not in shown
