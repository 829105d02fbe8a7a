"""Carrying a promotion out: a fast-forward push, or a GitHub / GitLab pull request.

`gitops.delivery.gates` decides that a commit may move to the next environment;
a `Promoter` moves it, and says where to in one line (the history row's
summary). Both modes write to git only through `GitSource.push`, which
never forces: the target branch (push mode) or the promotion branch
`gitops/promote-TO` (pull_request mode) moves only as a fast-forward.

- `PushPromoter`: the target branch itself is moved to the commit.
- `PullRequestPromoter`: the commit goes to `gitops/promote-TO`, then a pull
  request (GitHub: `GET`/`POST /repos/{owner}/{repo}/pulls`, `PATCH
  .../pulls/{number}`) or merge request (GitLab: `GET`/`POST
  /projects/:id/merge_requests`, `PUT .../merge_requests/:iid`) from it to
  the target branch is opened, or updated when one is open already (found
  by head and base). Its body is the evidence and the plan for the target
  environment (`gitops.delivery.gates.promotion_body`).

The credential is `--promote-token-file`: the git password of the push and
the API token. Without it the agent never writes to git. Where that token
may be sent is the agent's to say, never the repository's: an `api_url` in
the environment file (which any committer writes) is used only when it is
one of the agent's `--promote-api-url` (`allowed_api_url`), else the
promotion stops before anything is pushed or sent, saying where the setting
belongs; with no `--promote-api-url`, only the public APIs
(`DEFAULT_API_URLS`) are allowed.
Blocking calls: the agent runs them in a thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol
from urllib.parse import quote, urlsplit

import httpx

from gitops.errors import GitopsError
from gitops.delivery.gates import PromotionSettings
from gitops.redaction import redact

__all__ = [
    "PromotionError",
    "PromotionRequest",
    "Promoter",
    "PushPromoter",
    "PullRequestPromoter",
    "promotion_branch",
    "allowed_api_url",
    "DEFAULT_API_URLS",
]

DEFAULT_API_URLS = {"github": "https://api.github.com", "gitlab": "https://gitlab.com/api/v4"}

# Pushes `commit` to `branch` of the remote, as a fast-forward only (GitSource.push);
# False when the branch was already at the commit (nothing moved).
Push = Callable[[str, str], bool]


class PromotionError(GitopsError):
    """A promotion that did not happen; the message says what refused it."""


@dataclass(frozen=True)
class PromotionRequest:
    commit: str
    summary: str  # the commit's subject line
    settings: PromotionSettings
    title: str
    body: str  # markdown: the evidence and the target environment's plan
    # The branch the pull request comes from (default: `promotion_branch`); artifact
    # automation's is `gitops/automation-NAME` (`gitops.delivery.automation`).
    head: str | None = None
    # Where the settings were written, for an error about api_url (default: the environment file).
    settings_file: str | None = None


class Promoter(Protocol):
    def promote(self, request: PromotionRequest) -> str:
        """Move the commit; return where it went (e.g. a pull request's URL). Raises PromotionError."""
        ...


def promotion_branch(settings: PromotionSettings) -> str:
    return f"gitops/promote-{settings.to}"


def _same_url(url: str) -> tuple[str, str, int | None, str]:
    parts = urlsplit(url)
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port, parts.path.rstrip("/")


def allowed_api_url(settings: PromotionSettings, allowed: tuple[str, ...], settings_file: str | None = None) -> str:
    """The API base URL the token goes to: the environment file's `api_url`
    (else the provider's public API) when it is one the agent allows
    (`allowed`: its `--promote-api-url`s; none given: the public APIs).
    Raises PromotionError naming the setting and where it belongs."""
    provider = settings.provider or "github"
    wanted = (settings.api_url or DEFAULT_API_URLS[provider]).rstrip("/")
    permitted = allowed or tuple(DEFAULT_API_URLS.values())
    if any(_same_url(wanted) == _same_url(url) for url in permitted):
        return wanted
    named = f"api_url '{wanted}'" if settings.api_url else f"the default {provider} API {wanted}"
    where, whose = (settings_file, "automation") if settings_file else (f"environments/{settings.source}.toml", "promotion")
    raise PromotionError(
        f"{'[promotion] ' if settings_file is None else ''}{named} in {where} is not an API this agent sends its "
        f"{whose} token to: where the token may go is the agent's setting, not the repository's "
        f"(gitops run --promote-api-url URL; allowed now: {', '.join(permitted)})"
    )


class PushPromoter:
    def __init__(self, push: Push) -> None:
        self._push = push

    def promote(self, request: PromotionRequest) -> str:
        branch = request.settings.branch
        try:
            moved = self._push(request.commit, branch)
        except GitopsError as error:
            raise PromotionError(str(error)) from None
        if not moved:
            return f"{branch} already at {request.commit[:7]} (nothing pushed)"
        return f"pushed {request.commit[:7]} to {branch} (fast-forward)"


class PullRequestPromoter:
    def __init__(self, push: Push, token: str, timeout_s: float = 30.0, api_urls: tuple[str, ...] = ()) -> None:
        self._push = push
        self._token = token
        self._timeout_s = timeout_s
        self._api_urls = api_urls  # the agent's --promote-api-url: where the token may go

    def promote(self, request: PromotionRequest) -> str:
        settings = request.settings
        base_url = allowed_api_url(settings, self._api_urls, request.settings_file)  # before anything is pushed or sent
        head = request.head or promotion_branch(settings)
        try:
            self._push(request.commit, head)
        except GitopsError as error:
            raise PromotionError(str(error)) from None
        try:
            with httpx.Client(timeout=self._timeout_s) as client:
                if settings.provider == "gitlab":
                    return self._gitlab(client, request, head, base_url)
                return self._github(client, request, head, base_url)
        except httpx.HTTPError as error:
            raise PromotionError(redact(f"{settings.provider} API: {type(error).__name__}: {error}")) from None

    def _github(self, client: httpx.Client, request: PromotionRequest, head: str, base_url: str) -> str:
        settings = request.settings
        repository = settings.repository or ""
        owner = repository.partition("/")[0]
        pulls = f"{base_url}/repos/{repository}/pulls"
        headers = {
            "Authorization": f"Bearer {self._token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
        }
        found = _json(
            client.get(pulls, params={"head": f"{owner}:{head}", "base": settings.branch, "state": "open"}, headers=headers)
        )
        fields = {"title": request.title, "body": request.body}
        if isinstance(found, list) and found:
            number = found[0]["number"]
            answer = _json(client.patch(f"{pulls}/{number}", json=fields, headers=headers))
            return f"updated pull request {answer.get('html_url') or number}"
        answer = _json(client.post(pulls, json={**fields, "head": head, "base": settings.branch}, headers=headers))
        return f"opened pull request {answer.get('html_url') or answer.get('number')}"

    def _gitlab(self, client: httpx.Client, request: PromotionRequest, head: str, base_url: str) -> str:
        settings = request.settings
        project = quote(settings.repository or "", safe="")
        requests = f"{base_url}/projects/{project}/merge_requests"
        headers = {"PRIVATE-TOKEN": self._token}
        query = {"source_branch": head, "target_branch": settings.branch, "state": "opened"}
        found = _json(client.get(requests, params=query, headers=headers))
        if isinstance(found, list) and found:
            iid = found[0]["iid"]
            answer = _json(
                client.put(f"{requests}/{iid}", json={"title": request.title, "description": request.body}, headers=headers)
            )
            return f"updated merge request {answer.get('web_url') or iid}"
        fields = {"source_branch": head, "target_branch": settings.branch, "title": request.title, "description": request.body}
        answer = _json(client.post(requests, json=fields, headers=headers))
        return f"opened merge request {answer.get('web_url') or answer.get('iid')}"


def _json(answer: httpx.Response) -> Any:
    if answer.status_code >= 300:
        raise PromotionError(
            redact(f"{answer.request.method} {answer.request.url.path}: HTTP {answer.status_code}: {answer.text[:200]}")
        )
    try:
        return answer.json()
    except ValueError:
        raise PromotionError(f"{answer.request.method} {answer.request.url.path}: the answer is not JSON") from None
