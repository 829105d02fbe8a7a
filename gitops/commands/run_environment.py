"""`gitops run --environment NAME`: the agent's environment duties, put together.

Builds the `gitops.loop.environment_duties.EnvironmentDuties` of an agent from
its flags: the promoter (only with `--promote-token-file`: a push or a pull
request, as `[promotion] mode` says, its API only one of `--promote-api-url`), the per-endpoint
totals the controller adds up from the proxies' reports as evidence
(`gitops.delivery.evidence`; None when the controller does not answer), and the plan for the target environment in markdown
(the commit against the target branch's newest commit, both loaded with the
target's environment file, as `gitops plan --environment TO --format
markdown` prints it). Must not: decide anything; wiring only.
"""

from __future__ import annotations

import argparse
import logging
from typing import Awaitable, Callable, Protocol

from gitops.commands.plan import render_markdown
from gitops.loop.environment_duties import EnvironmentDuties
from gitops.delivery.evidence import Counts, of_totals
from gitops.reconcile.planner import plan
from gitops.delivery.promotion import PromotionError, PromotionRequest, PullRequestPromoter, PushPromoter
from gitops.redaction import Credentials
from gitops.sources.repos import GitSource
from gitops.specs.environments import EnvironmentSettings
from gitops.specs.loading import Loader
from vocabulary.control.request_stats import RequestStats
from vocabulary.spec.state import ServingState

__all__ = ["build_duties", "evidence_counters", "target_plan", "SettingsPromoter", "EndpointTotals"]

_LOG = logging.getLogger(__name__)


class EndpointTotals(Protocol):
    """Where the evidence comes from: `controller.client.ControllerClient` (tests pass fakes)."""

    async def endpoint_totals(self) -> dict[str, RequestStats]: ...

# The user name a forge wants with a token as the password of an https push.
_TOKEN_USERS = {"github": "x-access-token", "gitlab": "oauth2"}


class SettingsPromoter:
    """Pushes or opens a pull request, as the promoted commit's `[promotion] mode` says."""

    def __init__(self, source: GitSource, token: str, api_urls: tuple[str, ...] = ()) -> None:
        self._source = source
        self._token = token
        self._api_urls = api_urls  # --promote-api-url: the only APIs the token may go to

    def promote(self, request: PromotionRequest) -> str:
        settings = request.settings
        credentials = Credentials(_TOKEN_USERS.get(settings.provider or "", "git"), self._token)

        def push(sha: str, branch: str) -> bool:
            return self._source.push(sha, branch, credentials)

        if settings.mode == "push":
            return PushPromoter(push).promote(request)
        if settings.provider not in _TOKEN_USERS:
            raise PromotionError(f"pull_request mode needs provider github or gitlab (got {settings.provider})")
        return PullRequestPromoter(push, self._token, api_urls=self._api_urls).promote(request)


def target_plan(source: GitSource, spec_path: str, commit: str, settings: EnvironmentSettings) -> str:
    """`gitops plan --environment TO --format markdown` of `commit` against the
    target branch's newest commit (nothing, when the branch does not exist yet).
    A commit that is invalid in the target environment is not promoted: PromotionError."""
    promotion = settings.promotion
    if promotion is None:
        return ""
    loader = Loader(environment=promotion.to)
    desired = loader.load_tree(source.tree(source.revision(commit)), spec_path)
    if desired.state is None:
        first = desired.errors[0] if desired.errors else "no state"
        raise PromotionError(f"{commit[:7]} is invalid in {promotion.to}: {first} ({len(desired.errors)} error(s))")
    head = source.branch_head(promotion.branch)
    actual = loader.load_tree(source.tree(source.revision(head)), spec_path).state if head else None
    result = plan(desired.state, actual or ServingState())
    return render_markdown(result, head[:12] if head else None, commit[:12], promotion.to)


def evidence_counters(controller: EndpointTotals) -> Callable[[], Awaitable[Counts | None]]:
    """The promotion's counters: every endpoint's totals as the controller adds them up
    from the proxies' reports; None (no evidence, judge nothing) when it does not answer."""

    async def counters() -> Counts | None:
        try:
            return of_totals(await controller.endpoint_totals())
        except Exception as error:  # noqa: BLE001 — no answer is no evidence, never a crash of the tick
            _LOG.debug("no promotion evidence from the controller: %s", error)
            return None

    return counters


def build_duties(
    args: argparse.Namespace, source: GitSource, controller: EndpointTotals, token: str | None
) -> EnvironmentDuties:
    def plan_markdown(commit: str, settings: EnvironmentSettings) -> str:
        return target_plan(source, args.path, commit, settings)

    return EnvironmentDuties(
        args.environment,
        source.branch,
        promoter=SettingsPromoter(source, token, tuple(args.promote_api_url or ())) if token is not None else None,
        counters=evidence_counters(controller),
        plan_markdown=plan_markdown,
    )
