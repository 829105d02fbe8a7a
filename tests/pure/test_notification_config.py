"""The `--notify` file (`gitops.notifications.config`): channels, or every error located."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitops.notifications.config import (
    GitHubProvider,
    GitLabProvider,
    NotifyFileError,
    SlackProvider,
    WebhookProvider,
    parse_notify_file,
)
from gitops.notifications.events import PROGRESS_EVENTS, EventKind

SECRETS = {"/etc/gitops/github-token": "ghp_filetoken", "/etc/gitops/empty": ""}


def read_secret(path: str) -> str:
    if path not in SECRETS:
        raise FileNotFoundError(2, "No such file or directory", path)
    return SECRETS[path]


def errors_of(text: str) -> list[str]:
    with pytest.raises(NotifyFileError) as raised:
        parse_notify_file("notify.toml", text, read_secret)
    return raised.value.errors


def test_every_provider_type_is_read_with_its_settings() -> None:
    channels = parse_notify_file(
        "notify.toml",
        """
[providers.hook]
type = "webhook"
url = "https://ci.example.com/hook"
secret = "s3cret"

[providers.chat]
type = "slack"
url = "https://hooks.slack.com/services/T/B/X"
events = ["invalid", "synced"]

[providers.gh]
type = "github"
repository = "you/specs"
token_file = "/etc/gitops/github-token"
api_url = "https://github.example.com/api/v3/"

[providers.gl]
type = "gitlab"
project = 42
token = "glpat-inline"
""",
        read_secret,
    )
    hook, chat, github, gitlab = (channel.provider for channel in channels)
    assert [channel.name for channel in channels] == ["hook", "chat", "gh", "gl"]
    assert isinstance(hook, WebhookProvider) and hook.secret.get_secret_value() == "s3cret"
    assert isinstance(chat, SlackProvider) and chat.events == {EventKind.INVALID, EventKind.SYNCED}
    assert isinstance(github, GitHubProvider) and github.token.get_secret_value() == "ghp_filetoken"
    assert github.api_url == "https://github.example.com/api/v3"
    assert isinstance(gitlab, GitLabProvider) and gitlab.api_url == "https://gitlab.com/api/v4"


def test_a_webhook_gets_every_result_event_but_not_a_commit_s_progress_unless_it_lists_some() -> None:
    (channel,) = parse_notify_file(
        "n.toml", '[providers.hook]\ntype = "webhook"\nurl = "http://127.0.0.1:9/x"\n', read_secret
    )
    assert {kind for kind in EventKind if channel.provider.wants(kind)} == set(EventKind) - PROGRESS_EVENTS
    (listed,) = parse_notify_file(
        "n.toml", '[providers.hook]\ntype = "webhook"\nurl = "http://127.0.0.1:9/x"\nevents = ["seen"]\n', read_secret
    )
    assert {kind for kind in EventKind if listed.provider.wants(kind)} == {EventKind.SEEN}


def test_a_commit_status_provider_gets_every_event_pending_and_running_included() -> None:
    (channel,) = parse_notify_file(
        "n.toml", '[providers.ci]\ntype = "github"\nrepository = "o/r"\ntoken = "t"\n', read_secret
    )
    assert all(channel.provider.wants(kind) for kind in EventKind)


def test_mistakes_are_reported_together_with_file_line_and_column() -> None:
    assert errors_of(
        """[providers.gh]
type = "github"
repository = "specs"
token = "t"
colour = "blue"

[providers.chat]
type = "slack"
url = "https://hooks.slack.com/services/T/B/X"
events = ["applied", "deployed"]
"""
    ) == [
        "notify.toml:3:1: providers.gh.repository: must be OWNER/REPO (got 'specs')",
        "notify.toml:5:1: providers.gh: unknown key 'colour'",
        "notify.toml:10:22: providers.chat.events.1: must be one of seen, applying, applied, invalid, apply_failed, "
        "rollout_aborted, rolled_back, commit_quarantined, synced, git_unreachable, promoted, action",
    ]


def test_an_unknown_provider_type_is_located_at_its_type() -> None:
    assert errors_of('[providers.pager]\ntype = "pagerduty"\n') == [
        "notify.toml:2:1: providers.pager.type: must be one of webhook, slack, github, gitlab"
    ]


def test_a_token_file_that_cannot_be_read_is_located_without_its_content() -> None:
    text = '[providers.gh]\ntype = "github"\nrepository = "you/specs"\ntoken_file = "/etc/gitops/missing"\n'
    assert errors_of(text) == [
        "notify.toml:4:1: providers.gh.token_file: cannot read /etc/gitops/missing: No such file or directory"
    ]


def test_an_empty_token_file_is_an_error() -> None:
    text = '[providers.gh]\ntype = "github"\nrepository = "you/specs"\ntoken_file = "/etc/gitops/empty"\n'
    assert errors_of(text) == ["notify.toml:4:1: providers.gh.token_file: /etc/gitops/empty is empty"]


def test_a_commit_status_provider_needs_a_token() -> None:
    assert errors_of('[providers.gl]\ntype = "gitlab"\nproject = "g/specs"\n') == [
        "notify.toml:1:1: providers.gl: missing token (or token_file)"
    ]


def test_a_secret_given_twice_is_an_error() -> None:
    text = '[providers.chat]\ntype = "slack"\nurl = "https://x"\nurl_file = "/etc/gitops/github-token"\n'
    assert errors_of(text) == ["notify.toml:4:1: providers.chat: set url or url_file, not both"]


def test_a_toml_syntax_error_is_located() -> None:
    assert errors_of('[providers.x\ntype = "slack"\n') == [
        "notify.toml:1:13: TOML syntax: Expected ']' at the end of a table declaration"
    ]


def test_a_file_without_providers_is_an_error() -> None:
    assert errors_of("# nothing yet\n") == ["notify.toml:1:1: no [providers.NAME] table: nothing would be notified"]


def test_a_secret_never_appears_in_an_error() -> None:
    errors = errors_of('[providers.gh]\ntype = "github"\nrepository = "you/specs"\ntoken = 12345\n')
    assert errors == ["notify.toml:4:1: providers.gh.token: input should be a valid string"]
    assert "12345" not in "\n".join(errors)


def test_the_guide_s_example_is_a_valid_notify_file() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "notifications.md").read_text()
    section = page.split("# Notifications", 1)[1]
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    channels = parse_notify_file("notifications.md", example, lambda path: f"secret from {path}")
    assert [channel.provider.type for channel in channels] == ["slack", "github", "gitlab", "webhook"]
