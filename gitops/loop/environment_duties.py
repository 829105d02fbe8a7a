"""What an environment's agent does besides reconciling: sync windows before, promotion after.

The agent (`gitops.loop.agent`) owns one `EnvironmentDuties` when it runs with
`--environment`, and calls it at two points of a tick:

- `hold(loaded, commit, applied)`, before a new commit is applied: the
  sync window holding it (`gitops.delivery.windows`), or None; a `gitops sync
  --override-window` asked for since lets it through once, and the apply
  is recorded in history as a `window_override` row naming who asked. The
  windows are the applied commit's as well as the new commit's own (each
  may hold it): a commit that deletes or widens `[[sync_windows]]` is held
  by the windows it would remove until they allow it, or an override.
- `after_tick(...)`, once a tick is over: the commit served (the last one
  applied) moves through the promotion gates (`gitops.delivery.gates.advance`)
  on the evidence the agent has: how long it has been applied and Synced,
  its rollout rows in history (aborted, or steps passed with their numbers),
  and the proxies' request and shadow counters since it began to serve
  (`gitops.delivery.evidence`). When every gate passed, the `Promoter`
  (`gitops.delivery.promotion`) moves it, and a `promoted` row is recorded.
  The gates and the soak are the served commit's and, as strict, those of
  the commit applied before it (`stricter`): a commit cannot lower the bar
  it is itself judged by.

The agent tells it each applied commit's settings (`applied_settings`,
loading the applied commit when it does not know them, after a restart).

It keeps the small state this needs (the window's hold, an override asked
for, the commit's promotion state and its counter baseline); the decisions
are the pure modules'. Must not: touch git, Ray or HTTP except through the
collaborators it is given.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace
from datetime import datetime, UTC
from typing import Awaitable, Callable

from gitops.status.environment import EnvironmentSummary, GateSummary, HeldSummary, PromotionSummary
from gitops.errors import GitopsError
from gitops.delivery.evidence import Counts
from gitops.reconcile.outcomes import HistoryEntry, Outcome
from gitops.delivery.promotion import PromotionError, PromotionRequest, Promoter
from gitops.delivery.gates import (
    Evidence, Phase, PromotionSettings, PromotionState, advance, promoted, promotion_body,
)
from gitops.specs.environments import EnvironmentSettings
from gitops.specs.loading import LoadResult
from gitops.delivery.windows import Hold, hold_at

__all__ = ["EnvironmentDuties", "HeldCommit", "Served", "stricter"]

_LOG = logging.getLogger("gitops.environments")
# A promotion that failed (the remote refused, the API answered an error) is tried again after this.
_RETRY_S = 30.0


@dataclass(frozen=True)
class HeldCommit:
    commit: str
    hold: Hold


@dataclass(frozen=True)
class Served:
    """The commit the environment serves, as the agent sees it after a tick."""

    entry: HistoryEntry  # its last `applied`/`noop` row
    synced: bool  # the agent's status is Synced and nothing newer waits
    recent: tuple[HistoryEntry, ...]  # newest rows first, for its rollout evidence


class EnvironmentDuties:
    def __init__(
        self,
        name: str,
        branch: str,
        *,
        promoter: Promoter | None = None,
        counters: Callable[[], Awaitable[Counts | None]] | None = None,
        plan_markdown: Callable[[str, EnvironmentSettings], str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self.branch = branch
        self._promoter = promoter
        self._counters = counters
        self._plan_markdown = plan_markdown
        self._clock = clock
        self._settings: EnvironmentSettings | None = None  # the newest loaded commit's
        self._applied: tuple[str, EnvironmentSettings | None] | None = None  # the applied commit, its settings
        self._before: EnvironmentSettings | None = None  # the settings of the commit applied before it
        self.held: HeldCommit | None = None
        self._override_by: str | None = None
        self.promotion = PromotionState()
        self._baseline: Counts | None = None
        self._failed_at: float | None = None  # the last promotion attempt that failed
        self.last_error: str | None = None

    # --- sync windows ------------------------------------------------------------------

    def request_override(self, who: str) -> None:
        """`gitops sync --override-window`: the next commit a window holds is applied anyway."""
        self._override_by = who

    def knows_applied(self, commit: str) -> bool:
        return self._applied is not None and self._applied[0] == commit

    def applied_settings(self, commit: str, settings: EnvironmentSettings | None) -> None:
        """`commit` is the applied one now, with these settings (None: no environment file)."""
        if self.knows_applied(commit):
            return
        if self._applied is not None:
            self._before = self._applied[1]
        self._applied = (commit, settings)

    def hold(self, loaded: LoadResult, commit: str, applied: str | None) -> tuple[Hold | None, HistoryEntry | None]:
        """Whether a sync window holds `commit` now, the applied commit's or its
        own; or the `window_override` row of an override that lets it through
        (the agent records it, then applies)."""
        if loaded.environment is not None:
            self._settings = loaded.environment
        if commit == applied:
            self.applied_settings(commit, loaded.environment)
            self.held = None
            return None, None
        judged = [self._settings]
        if self._applied is not None and applied is not None and self._applied[0] == applied:
            judged.insert(0, self._applied[1])  # the windows in force: a commit's change to them waits for them
        now = self._clock()
        at = datetime.fromtimestamp(now, UTC)
        found = next((hold for hold in (hold_at(s.sync_windows, at) for s in judged if s) if hold), None)
        if found is None:
            self.held = None
            return None, None
        if self._override_by is not None:
            who, self._override_by = self._override_by, None
            self.held = None
            row = HistoryEntry(
                commit=commit, branch=self.branch, author_time=now, summary="gitops sync --override-window",
                started_at=now, finished_at=now, result=Outcome.WINDOW_OVERRIDE,
                plan_summary=f"sync window overridden by {who}: {found.message}",
            )
            return None, row
        self.held = HeldCommit(commit, found)
        return found, None

    # --- promotion ------------------------------------------------------------------------

    def _promotion_settings(self) -> PromotionSettings | None:
        """The served commit's `[promotion]`, its gates and soak no laxer than the commit applied before's."""
        settings = self._applied[1] if self._applied is not None else self._settings
        if settings is None or settings.promotion is None:
            return None
        before = self._before.promotion if self._before is not None else None
        return stricter(settings.promotion, before)

    def _served_settings(self) -> EnvironmentSettings | None:
        return self._applied[1] if self._applied is not None else self._settings

    async def after_tick(self, served: Served | None) -> HistoryEntry | None:
        """Advance the served commit through the gates; the `promoted` row when it moved."""
        settings = self._promotion_settings()
        if settings is None or served is None:
            return None
        commit = served.entry.commit
        if self.promotion.commit != commit:
            self._baseline, self._failed_at, self.last_error = None, None, None
            already = any(row.commit == commit and row.result is Outcome.PROMOTED for row in served.recent)
            self.promotion = PromotionState(commit=commit, phase=Phase.PROMOTED if already else Phase.SOAKING)
        if self.promotion.phase in (Phase.PROMOTED, Phase.FAILED):
            return None
        now = self._clock()
        evidence = await self._evidence(commit, served)
        if evidence is None:
            return None
        self.promotion = advance(self.promotion, settings, evidence, now)
        if self.promotion.phase is Phase.FAILED:
            _LOG.warning("%s will not be promoted to %s: %s", commit[:7], settings.to, self.promotion.message)
        if self.promotion.phase is not Phase.READY or self._promoter is None:
            return None
        if self._failed_at is not None and now - self._failed_at < _RETRY_S:
            return None
        return await self._promote(served.entry, now)

    async def _evidence(self, commit: str, served: Served) -> Evidence | None:
        rows = [row for row in served.recent if row.commit == commit]
        stopped = tuple(f"{'; '.join(row.errors)}" for row in rows if row.result is Outcome.ABORTED)
        passed = tuple(row.plan_summary for row in reversed(rows) if row.result is Outcome.STEP)
        counted = Counts()
        if self._counters is not None and served.synced:
            now_counts = await self._counters()
            if now_counts is None:
                return None  # a proxy did not answer: judge nothing on partial numbers
            if self._baseline is None:
                self._baseline = now_counts
            counted = now_counts.since(self._baseline)
        return Evidence(
            commit=commit, synced=served.synced, rollouts_stopped=stopped, rollouts_passed=passed,
            backend_requests=counted.requests, backend_errors=counted.errors,
            shadow_compared=counted.compared, shadow_mismatched=counted.mismatched,
        )

    async def _promote(self, entry: HistoryEntry, now: float) -> HistoryEntry | None:
        environment, settings = self._served_settings(), self._promotion_settings()
        assert self._promoter is not None and environment is not None and settings is not None
        try:
            plan = await asyncio.to_thread(self._plan_markdown, entry.commit, environment) if self._plan_markdown else ""
        except GitopsError as error:
            self._failed_at, self.last_error = now, f"the plan for {settings.to}: {error}"
            _LOG.warning("promotion of %s to %s waits: %s", entry.commit[:7], settings.to, self.last_error)
            return None
        request = PromotionRequest(
            commit=entry.commit, summary=entry.summary, settings=settings,
            title=f"Promote {entry.commit[:7]} from {settings.source} to {settings.to}: {entry.summary}"[:250],
            body=promotion_body(entry.commit, entry.summary, self.promotion, settings, plan, now),
        )
        try:
            where = await asyncio.to_thread(self._promoter.promote, request)
        except PromotionError as error:
            self._failed_at, self.last_error = now, str(error)
            _LOG.warning("promotion of %s to %s failed: %s", entry.commit[:7], settings.to, error)
            return None
        finished = self._clock()
        ready_at = self.promotion.ready_at or finished
        self.promotion = promoted(self.promotion, where)
        self.last_error = None
        gates = "; ".join(f"{gate.name}: {gate.detail}" for gate in self.promotion.gates)
        return replace(
            entry, id=None, result=Outcome.PROMOTED, started_at=ready_at, finished_at=finished,
            plan_summary=f"promoted to {settings.to} ({settings.branch}): {where} [{gates}]", actions=0, errors=(),
        )

    # --- status -----------------------------------------------------------------------------

    def status(self) -> EnvironmentSummary:
        """The environment as `gitops status` and the status page show it."""
        promotion = self._promotion_settings()
        held = None
        if self.held is not None:
            until = self.held.hold.until
            held = HeldSummary(
                commit=self.held.commit, reason=self.held.hold.reason, message=self.held.hold.message,
                until=until.strftime("%Y-%m-%dT%H:%M:%SZ") if until else None,
            )
        summary = None
        if promotion is not None:
            state = self.promotion
            summary = PromotionSummary(
                to=promotion.to, branch=promotion.branch, mode=promotion.mode, commit=state.commit,
                phase=state.phase.value, message=state.message, soaked_s=round(state.soaked_s(self._clock()), 1),
                soak_s=promotion.soak_s, error=self.last_error,
                gates=tuple(GateSummary(name=g.name, passed=g.passed, detail=g.detail) for g in state.gates),
            )
        return EnvironmentSummary(name=self.name, branch=self.branch, held=held, promotion=summary)


def stricter(own: PromotionSettings, before: PromotionSettings | None) -> PromotionSettings:
    """`own` with the gates of `before` added and the longer soak: the bar the
    commit applied before set, which the served commit's change cannot lower."""
    if before is None:
        return own
    require = tuple(dict.fromkeys((*own.require, *before.require)))
    return replace(own, require=require, soak_s=max(own.soak_s, before.soak_s))
