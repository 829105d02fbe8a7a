"""The reconcile loop: a commit in git becomes the state of the cluster.

Owns when to reconcile and the order of one tick. Wake sources (a poll
timer with jitter, the ref watch of a local repository, the webhook, a
manual sync, the resync timer) all feed one asyncio.Event; each tick is
level-triggered and reads both sides again:

    newest revision → desired state (or its errors) → actual state
    → plan → apply (goals awaited, newest commit wins) → status, history,
    metrics written once

A restart needs nothing from the previous run except the history ledger:
the plan is always made against what the controller reports, so an apply
cut short is completed, never repeated. Must not: touch git, Ray or HTTP
directly — those arrive as collaborators (`GitSource`, a `GoalAPI` client).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import git

from vocabulary.goal_api import GoalAPI
from vocabulary.configs import ServingState
from gitops.applying import Deadlines, apply
from gitops.history import History, HistoryEntry, Outcome
from gitops.specs.loading import LoadResult
from gitops.metrics import AgentMetrics
from gitops.notifications.delivering import Notifier
from gitops.notifications.events import TickOutcome
from gitops.plans import Plan
from gitops.sources.repos import GitSource, Revision, SourceError
from gitops.sources.watching import RefWatcher, jittered
from gitops.status import AgentStatus, StatusFacts, roll_up

__all__ = ["Agent", "AgentSettings", "Trigger", "Loader", "Planner", "reconcile_event", "progress_event"]

_LOG = logging.getLogger("gitops.agent")
Logger = logging.Logger | logging.LoggerAdapter
Fields = dict[str, Any]


class Trigger(str, enum.Enum):
    START = "start"
    POLL = "poll"
    WATCH = "watch"
    WEBHOOK = "webhook"
    SYNC = "sync"
    RESYNC = "resync"


# A manual sync and the resync timer compare with the cluster even when
# the commit is unchanged: that is how drift is found.
_FULL = {Trigger.START, Trigger.SYNC, Trigger.RESYNC}


Loader = Callable[[git.Repo, str, str], LoadResult]  # (repository, commit, spec path)
Planner = Callable[[ServingState, ServingState], Plan]


@dataclass(frozen=True)
class AgentSettings:
    spec_path: str = "deployments"
    interval_s: float = 30.0
    resync_interval_s: float = 60.0
    watch: bool = True  # the ref watch, for a local repository
    # Where a suspension is remembered, so a restart does not silently resume.
    suspend_marker: Path | None = None
    deadlines: Deadlines = field(default_factory=Deadlines)


class Agent:
    def __init__(
        self,
        source: GitSource,
        client: GoalAPI,
        history: History,
        *,
        load: Loader,
        plan: Planner,
        metrics: AgentMetrics,
        settings: AgentSettings = AgentSettings(),
        log: Logger = _LOG,  # every event (reconcile, progress, errors) with its fields
        notifier: Notifier | None = None,  # told each tick's outcome; never waited for
    ) -> None:
        self._notifier = notifier
        self._source = source
        self._client = client
        self._history = history
        self._load = load
        self._plan = plan
        self.metrics = metrics
        self._settings = settings
        self._log = log
        self._tick_plan: Plan | None = None  # the plan of the tick under way, for event fields
        self._wake: asyncio.Event | None = None  # made by run(), on its own loop
        self._triggers: set[Trigger] = set()
        self._wakes = 0  # bumped by every wake-up; lets an apply notice news
        self._wakes_seen = 0
        marker = settings.suspend_marker
        self._suspended = marker is not None and marker.exists()
        self._watched: Revision | None = None
        self._applying: Revision | None = None
        self._progress = ""
        self._git_error: str | None = None
        self._controller_error: str | None = None
        self._cluster: dict[str, Any] | None = None
        self._exports_in_use: list[str | None] | None = None  # set by a tick that read the controller
        self.ticks = 0

    # --- wake-ups and admin verbs ---------------------------------------------

    def notify(self, trigger: Trigger) -> None:
        """Ask for a tick; call on the agent's event loop."""
        self._triggers.add(trigger)
        self._wakes += 1
        if self._wake is not None:
            self._wake.set()

    def suspend(self) -> None:
        self._suspended = True
        if self._settings.suspend_marker is not None:
            self._settings.suspend_marker.parent.mkdir(parents=True, exist_ok=True)
            self._settings.suspend_marker.touch()
        self._publish_status()

    def resume(self) -> None:
        self._suspended = False
        if self._settings.suspend_marker is not None:
            self._settings.suspend_marker.unlink(missing_ok=True)
        self.notify(Trigger.SYNC)

    @property
    def suspended(self) -> bool:
        return self._suspended

    def status(self) -> AgentStatus:
        return roll_up(
            StatusFacts(
                repo=self._source.location,
                branch=self._source.branch,
                path=self._settings.spec_path,
                suspended=self._suspended,
                watched=self._watched.sha if self._watched else None,
                applying=self._applying.sha if self._applying else None,
                progress=self._progress,
                last_attempt=self._history.last(),
                last_applied=self._history.last_applied(),
                git_error=self._git_error,
                controller_error=self._controller_error,
                cluster=self._cluster,
                notifications=self._notifier.health() if self._notifier else None,
            )
        )

    def history(self, limit: int = 50) -> list[HistoryEntry]:
        return self._history.recent(limit)

    # --- the loop ----------------------------------------------------------------

    async def run(self) -> None:
        """Reconcile until cancelled."""
        timers = [
            asyncio.create_task(self._every(self._settings.interval_s, Trigger.POLL, jitter=0.1)),
            asyncio.create_task(self._every(self._settings.resync_interval_s, Trigger.RESYNC, jitter=0.0)),
        ]
        watcher = self._start_watch()
        self._wake = wake = asyncio.Event()
        self.notify(Trigger.START)
        try:
            while True:
                await wake.wait()
                wake.clear()
                triggers, self._triggers = self._triggers, set()
                if not self._suspended:
                    await self._guarded_tick(full=bool(triggers & _FULL))
        finally:
            for timer in timers:
                timer.cancel()
            if watcher is not None:
                watcher.stop()
            self._wake = None

    async def _guarded_tick(self, full: bool) -> None:
        """A tick that cannot end the loop: an unexpected error is shown and
        counted, and the next tick starts from scratch (level-triggered)."""
        started = time.monotonic()
        try:
            await self.tick(full=full)
        except Exception as error:  # noqa: BLE001 — the loop must outlive any one tick
            self._controller_error = f"reconcile error: {type(error).__name__}: {error}"
            self.metrics.reconcile_finished("failure", time.monotonic() - started)
            self._log.error(self._controller_error, extra={"result": "error"})
            self._publish_status()

    async def _every(self, interval_s: float, trigger: Trigger, jitter: float) -> None:
        while True:
            await asyncio.sleep(jittered(interval_s, jitter))
            self.notify(trigger)

    def _start_watch(self) -> RefWatcher | None:
        refs_dir = self._source.refs_dir
        if not self._settings.watch or refs_dir is None:
            return None
        loop = asyncio.get_running_loop()
        watcher = RefWatcher(refs_dir, lambda: loop.call_soon_threadsafe(self.notify, Trigger.WATCH))
        watcher.start()
        return watcher

    async def tick(self, full: bool = True) -> HistoryEntry | None:
        """One reconcile; returns what it recorded, or None if nothing was attempted."""
        self.ticks += 1
        started, clock = time.time(), time.monotonic()
        revision = await self._newest()
        entry = None
        if revision is not None:
            last = self._history.last()
            if full or last is None or last.commit != revision.sha:
                entry = await self._reconcile(revision, started)
        await self._observe()
        self._finish(entry, time.monotonic() - clock)
        return entry

    async def _newest(self) -> Revision | None:
        try:
            revision = await asyncio.to_thread(self._source.newest)
        except SourceError as error:
            self._git_error = str(error)
            self.metrics.git_fetch("failure")
            return None
        self._git_error = None
        self._watched = revision
        self.metrics.git_fetch("success")
        return revision

    async def _reconcile(self, revision: Revision, started: float) -> HistoryEntry | None:
        loaded = await asyncio.to_thread(self._load, self._source.repo, revision.sha, self._settings.spec_path)
        errors = tuple(str(error) for error in loaded.errors)
        self.metrics.spec_errors(len(errors))
        if not loaded.ok or loaded.state is None:
            return self._record(revision, started, Outcome.INVALID, errors=errors)
        try:
            actual = await self._client.get_state()
        except Exception as error:  # noqa: BLE001 — reported in status, retried next tick
            self._controller_error = f"controller unavailable: {error}"
            return None
        self._controller_error = None
        self._exports_in_use = [b.working_dir for b in actual.backends.values()]
        plan = self._plan(loaded.state, actual)
        self._tick_plan = plan
        if not plan:
            return self._record(revision, started, Outcome.NOOP)
        return await self._apply(revision, started, plan, actual)

    async def _apply(self, revision: Revision, started: float, plan: Plan, actual: ServingState) -> HistoryEntry:
        drift = self._history.last_applied()
        if drift is not None and drift.commit == revision.sha:
            for _ in plan.actions:
                self.metrics.drift_corrected()
        working_dir = None
        if any(action.backend is not None for action in plan.actions):
            try:
                working_dir = str(await asyncio.to_thread(self._source.export, revision))
            except SourceError as error:  # a commit that cannot be exported (a link leading outside)
                return self._record(revision, started, Outcome.FAILED, plan=plan, errors=(str(error),))
            self._exports_in_use = [*(self._exports_in_use or []), working_dir]
        self._applying, self._progress = revision, ""
        try:
            result = await apply(
                plan,
                self._client,
                actual=actual,
                working_dir=working_dir,
                deadlines=self._settings.deadlines,
                superseded=lambda: self._superseded(revision),
                on_goal=self.metrics.goal_finished,
                on_progress=lambda message: self._show_progress(revision, message),
            )
        finally:
            self._applying, self._progress = None, ""
        errors = (result.error,) if result.error else ()
        return self._record(revision, started, Outcome(result.outcome.value), plan=plan, errors=errors)

    async def _superseded(self, applying: Revision) -> bool:
        """Newest commit wins: has the branch moved since this apply began?"""
        if self._wakes == self._wakes_seen:
            return False
        self._wakes_seen = self._wakes
        try:
            newest = await asyncio.to_thread(self._source.newest)
        except SourceError:
            return False
        return newest.sha != applying.sha

    def _show_progress(self, revision: Revision, message: str) -> None:
        self._progress = message
        text, fields = progress_event(revision.short, message)
        self._log.info(text, extra=fields)

    async def _observe(self) -> None:
        try:
            self._cluster = await self._client.get_status()
        except Exception as error:  # noqa: BLE001 — reported in status, retried next tick
            self._controller_error = f"controller unavailable: {error}"
            return
        self._controller_error = None
        self.metrics.cluster_observed(self._cluster)
        self.metrics.goals_pending(int(self._cluster.get("goals_pending", 0)))

    def _record(
        self, revision: Revision, started: float, outcome: Outcome, *, plan: Plan | None = None,
        errors: tuple[str, ...] = (),
    ) -> HistoryEntry:
        entry = HistoryEntry(
            commit=revision.sha,
            branch=revision.branch,
            author_time=revision.author_time,
            summary=revision.summary,
            started_at=started,
            finished_at=time.time(),
            result=outcome,
            plan_summary=plan.summary().text() if plan else "No changes.",
            actions=len(plan) if plan else 0,
            errors=errors,
        )
        if _worth_recording(entry, self._history.last()):
            entry = self._history.record(entry)
        if outcome.ok:
            self.metrics.commit_applied(revision.sha, revision.branch, revision.commit_time)
        return entry

    def _finish(self, entry: HistoryEntry | None, duration_s: float) -> None:
        """Status, metrics and the console line: once per tick."""
        if entry is not None:
            if entry.id is not None:  # recorded: new commit, change made or new failure
                text, fields = reconcile_event(entry, duration_s, self._tick_plan)
                self._log.info(text, extra=fields)  # `result` says how it went; the look stays calm
            # A superseded apply is neither: the next tick reconciles the newer commit.
            if entry.result is not Outcome.SUPERSEDED:
                self.metrics.reconcile_finished(_METRIC_RESULT[entry.result], duration_s)
        elif self._git_error or self._controller_error:
            self.metrics.reconcile_finished("failure", duration_s)
            self._log.error(self._git_error or self._controller_error, extra={"result": "error"})
        self._tick_plan = None
        self._export_cleanup()
        self._publish_status()
        if self._notifier is not None:
            self._notifier.observe(self._outcome(entry))

    def _outcome(self, entry: HistoryEntry | None) -> TickOutcome:
        """This tick in plain values, for the notifier."""
        recorded = entry is not None and entry.id is not None
        return TickOutcome(
            commit=entry.commit if entry else (self._watched.sha if self._watched else None),
            branch=self._source.branch,
            status=self.status().status.value,
            result=entry.result.value if recorded and entry else None,
            errors=entry.errors if recorded and entry else (),
            git_error=self._git_error,
        )

    def _publish_status(self) -> None:
        self.metrics.sync_status(self.status().status.value)

    def _export_cleanup(self) -> None:
        """Drop exports that neither the old nor the new configs point at.

        Running replicas no longer need their export (Ray uploaded it when
        they were created), so one tick of grace is enough.
        """
        if self._exports_in_use is None:
            return
        self._source.prune_exports(self._exports_in_use)
        self._exports_in_use = None


_METRIC_RESULT = {
    Outcome.APPLIED: "success",
    Outcome.NOOP: "noop",
    Outcome.INVALID: "failure",
    Outcome.FAILED: "failure",
}


def _worth_recording(entry: HistoryEntry, last: HistoryEntry | None) -> bool:
    """Every new commit, every change made, every new failure; not repeats."""
    if last is None or last.commit != entry.commit:
        return True
    if entry.result is Outcome.APPLIED:
        return True
    return (entry.result, entry.errors) != (last.result, last.errors) and entry.result is not Outcome.NOOP


def reconcile_event(entry: HistoryEntry, duration_s: float, plan: Plan | None) -> tuple[str, Fields]:
    """The one line a reconcile prints, and its fields.

    `commit`, `result` and `duration_s` always; `plan` and `actions` when it
    changed something; `errors` when it failed; `backend` when one backend
    is concerned (the one whose action failed, or the only one changed),
    else `backends` when several are.
    """
    commit = entry.commit[:7]
    text = f"{commit} {entry.result.value} in {duration_s:.2f}s"
    fields: Fields = {"commit": commit, "result": entry.result.value, "duration_s": round(duration_s, 3)}
    if entry.actions:
        text += f" — {entry.plan_summary}"
        fields.update(plan=entry.plan_summary, actions=entry.actions)
    failed = [m.group(1) for e in entry.errors if (m := _BACKEND_ACTION.match(e))][:1]
    changed = sorted({a.name for a in (plan.actions if plan else ()) if a.kind.is_backend})
    fields.update(_backend_fields(failed or changed))
    if entry.errors:
        fields["errors"] = list(entry.errors)
    return text, fields


def progress_event(commit: str, message: str) -> tuple[str, Fields]:
    """A "waiting for …" / "… done in" line of a long apply, with its backend(s)."""
    # Only the actions the line is about, never a replica's own error text after ": ".
    named = _BACKEND_ACTION.findall(message.split(": ", 1)[0])
    return f"{commit} … {message}", {"commit": commit, **_backend_fields(named)}


# How `gitops.applying.describe` names a backend action (names never hold spaces, commas or colons).
_BACKEND_ACTION = re.compile(r"(?:create|update|delete) backend ([a-z0-9._-]+)")


def _backend_fields(names: list[str]) -> Fields:
    if len(names) == 1:
        return {"backend": names[0]}
    return {"backends": names} if names else {}
