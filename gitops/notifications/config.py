"""The `--notify FILE`: which providers get which events, checked with locations.

The file lives on the agent's machine, never in the watched repository: it
holds tokens inline, or names files that hold them (`token_file`,
`secret_file`, `url_file`). One `[providers.NAME]` table per destination:

    [providers.chat]
    type = "slack"                      # webhook | slack | github | gitlab
    url_file = "/etc/gitops/slack-url"  # a Slack webhook URL is a secret too
    events = ["invalid", "apply_failed", "synced"]   # default: every event (chat and
                                                     # webhooks: but "seen" and "applying")

`parse_notify_file` returns the channels, or every problem as
`FILE:LINE:COL: message` (located with `gitops.specs.locating`). Reading a
secret file is the one I/O, and it is passed in. Must not: send anything,
or put a secret in an error message.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, SecretStr, StrictInt, StrictStr, ValidationError, field_validator

from gitops.notifications.events import PROGRESS_EVENTS, EventKind
from gitops.specs.locating import Locations, locate

__all__ = [
    "WebhookProvider",
    "SlackProvider",
    "GitHubProvider",
    "GitLabProvider",
    "Provider",
    "Channel",
    "NotifyFileError",
    "parse_notify_file",
]

_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")
_NAME = re.compile(r"[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?")
_REPOSITORY = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")

ReadSecret = Callable[[str], str]  # path -> the file's content, stripped; raises OSError


def _http_url(value: str) -> str:
    if not re.match(r"https?://[^/\s]+", value):
        raise ValueError("must be an http:// or https:// URL")
    return value.rstrip("/")


class _Provider(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    events: frozenset[EventKind] = frozenset(EventKind)

    def wants(self, kind: EventKind) -> bool:
        return kind in self.events


class WebhookProvider(_Provider):
    """Any HTTP receiver: the event as JSON, signed like Flux's generic-hmac."""

    events: frozenset[EventKind] = frozenset(EventKind) - PROGRESS_EVENTS
    type: Literal["webhook"]
    url: StrictStr
    secret: SecretStr | None = None  # signs the body (HMAC-SHA256) when set
    secret_file: StrictStr | None = None

    _url = field_validator("url")(_http_url)


class SlackProvider(_Provider):
    events: frozenset[EventKind] = frozenset(EventKind) - PROGRESS_EVENTS
    type: Literal["slack"]
    url: SecretStr | None = None  # the incoming webhook's URL is its credential
    url_file: StrictStr | None = None


class GitHubProvider(_Provider):
    type: Literal["github"]
    repository: StrictStr  # OWNER/REPO
    token: SecretStr | None = None
    token_file: StrictStr | None = None
    api_url: StrictStr = "https://api.github.com"  # GitHub Enterprise: https://HOST/api/v3

    _api = field_validator("api_url")(_http_url)

    @field_validator("repository")
    @classmethod
    def _owner_repo(cls, value: str) -> str:
        if _REPOSITORY.fullmatch(value) is None:
            raise ValueError(f"must be OWNER/REPO (got '{value}')")
        return value


class GitLabProvider(_Provider):
    type: Literal["gitlab"]
    project: StrictStr | StrictInt  # the numeric ID or the path, e.g. "group/specs"
    token: SecretStr | None = None
    token_file: StrictStr | None = None
    api_url: StrictStr = "https://gitlab.com/api/v4"  # self-managed: https://HOST/api/v4

    _api = field_validator("api_url")(_http_url)


Provider = WebhookProvider | SlackProvider | GitHubProvider | GitLabProvider
_MODELS: dict[str, type[_Provider]] = {
    "webhook": WebhookProvider,
    "slack": SlackProvider,
    "github": GitHubProvider,
    "gitlab": GitLabProvider,
}
# For each type: (the secret's key, its file key, whether one is required).
_SECRETS = {"webhook": ("secret", "secret_file", False), "slack": ("url", "url_file", True),
            "github": ("token", "token_file", True), "gitlab": ("token", "token_file", True)}


@dataclass(frozen=True)
class Channel:
    """One configured destination, its secret read."""

    name: str
    provider: Provider


class NotifyFileError(ValueError):
    """Every problem of a notify file, one `FILE:LINE:COL: message` each."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = errors


def parse_notify_file(label: str, text: str, read_secret: ReadSecret) -> tuple[Channel, ...]:
    """The channels of a notify file; `label` names it in errors."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise NotifyFileError([_syntax_error(label, text, str(error))]) from None
    located = _Located(label, locate(text))
    unknown = [key for key in document if key != "providers"]
    for key in unknown:
        located.add((key,), f"unknown table '{key}' (expected [providers.NAME])")
    providers = document.get("providers", {})
    if not isinstance(providers, dict):
        located.add(("providers",), "'providers' must be a table of named providers")
        providers = {}
    channels = [channel for name, raw in providers.items() if (channel := _channel(name, raw, located, read_secret))]
    if not channels and not located.errors:
        located.add((), "no [providers.NAME] table: nothing would be notified")
    if located.errors:
        raise NotifyFileError(located.errors)
    return tuple(channels)


class _Located:
    """Errors of one file, each placed at the key path it is about."""

    def __init__(self, label: str, locations: Locations) -> None:
        self.label = label
        self.locations = locations
        self.errors: list[str] = []

    def add(self, path: tuple[str | int, ...], message: str) -> None:
        line, col = self.locations.find(path)
        self.errors.append(f"{self.label}:{line}:{col}: {message}")


def _channel(name: str, raw: Any, located: _Located, read_secret: ReadSecret) -> Channel | None:
    at = ("providers", name)
    if _NAME.fullmatch(name) is None:
        located.add(at, f"providers.{name}: name must match {_NAME.pattern}")
    if not isinstance(raw, dict):
        located.add(at, f"providers.{name} must be a table")
        return None
    kind = raw.get("type")
    model = _MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        where = (*at, "type") if "type" in raw else at
        located.add(where, f"providers.{name}.type: must be one of {', '.join(_MODELS)}")
        return None
    try:
        provider = model.model_validate(raw)
    except ValidationError as error:
        for detail in error.errors():
            loc = (*at, *detail["loc"])
            located.add(loc, _describe(loc, detail))
        return None
    resolved = _with_secret(provider, kind, at, located, read_secret)  # type: ignore[arg-type]  # one of _MODELS, so a Provider; typed as their base
    return Channel(name, resolved) if resolved is not None else None


def _with_secret(
    provider: Provider, kind: str, at: tuple[str, ...], located: _Located, read: ReadSecret
) -> Provider | None:
    """Exactly one of the inline secret and its file; the file read into the inline key."""
    key, file_key, required = _SECRETS[kind]
    inline, path = getattr(provider, key), getattr(provider, file_key)
    dotted = ".".join(at)
    if inline is not None and path is not None:
        located.add((*at, file_key), f"{dotted}: set {key} or {file_key}, not both")
        return None
    if path is None:
        if required and inline is None:
            located.add(at, f"{dotted}: missing {key} (or {file_key})")
            return None
        return provider
    try:
        secret = read(path)
    except OSError as error:
        located.add((*at, file_key), f"{dotted}.{file_key}: cannot read {path}: {error.strerror}")
        return None
    if not secret:
        located.add((*at, file_key), f"{dotted}.{file_key}: {path} is empty")
        return None
    return provider.model_copy(update={key: SecretStr(secret), file_key: None})


def _describe(loc: tuple[str | int, ...], detail: Any) -> str:
    dotted = ".".join(str(part) for part in loc)
    kind = detail["type"]
    if kind == "extra_forbidden":
        return f"{'.'.join(str(part) for part in loc[:-1])}: unknown key '{loc[-1]}'"
    if kind == "missing":
        return f"{'.'.join(str(part) for part in loc[:-1])}: missing required key '{loc[-1]}'"
    if kind == "enum":
        return f"{dotted}: must be one of {', '.join(event.value for event in EventKind)}"
    if kind == "value_error":
        return f"{dotted}: {detail['ctx']['error']}"
    return f"{dotted}: {detail['msg'].lower()}"


def _syntax_error(label: str, text: str, message: str) -> str:
    found = _TOML_POSITION.search(message)
    if found:
        return f"{label}:{found.group(1)}:{found.group(2)}: TOML syntax: {message[: found.start()]}"
    lines = text.split("\n")
    reason = message.removesuffix(" (at end of document)")
    return f"{label}:{len(lines)}:{len(lines[-1]) + 1}: TOML syntax: {reason} (at end of file)"
