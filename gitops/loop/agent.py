"""The reconcile loop: a commit in git becomes the state of the cluster.

Owns when to reconcile and the order of one tick. Wake sources (a poll
timer with jitter, the ref watch of a local repository, the webhook, a
manual sync, the resync timer, the retry after a transient error) all feed
one asyncio.Event; each tick is level-triggered and reads both sides again:

    newest revision → desired state (or its errors) → actual state
    → plan → apply (goals awaited, newest commit wins) → observed status

A tick builds one `gitops.loop.ticks.TickReport`; history, metrics and the log
line are then written once, from that value. What the loop does after an
error follows its kind (`gitops.errors.ErrorKind`): a transient one (git or
the controller unreachable, a bug in a tick) is retried with backoff; a
stalled one (invalid specs, a commit that cannot be exported) waits for a
new commit.

Between ticks the agent reads the controller's status every few seconds
(`AgentSettings.observe_interval_s`), so the status, the status page and the
log (replica restarts; backends answering 5xx, rate-limited by
`gitops.status.backend_health.ErrorLog`) are seconds old, not a reconcile old (and
each outlier ejection a proxy made is a row of the history ledger, `gitops.status.ejections`); a
rollout seen passing a step or stopping brings a tick at once, which records
it (and, with --auto-revert, reverts an abort).

A commit applies whole or not at all: when a step of its plan fails, the
agent plans and applies the way back to the state the apply began from
(`_undo`), and the failed attempt's error ends with `reverted to <sha>`.

The branch's head that waits unapplied (a sync window holds it, the agent
is suspended, or a rollback quarantined it) is planned against what runs,
for the status page (`pending_plan`, its `why` saying which).

A restart needs nothing from the previous run except the history ledger:
the plan is always made against what the controller reports, so an apply
cut short is completed, never repeated. Must not: touch git, Ray or HTTP
directly — those arrive as collaborators (a `Source`, a `GoalAPI` client).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from gitops.reconcile.applying import ApplyResult, Deadlines, Progress, apply
from gitops.reconcile.apply_traces import StageClock, TraceSink, apply_trace
from gitops.errors import ErrorKind, SourceError
from gitops.reconcile.gpus import capacity_problems
from gitops.loop.history import History
from gitops.reconcile.outcomes import Action, Ejection, HistoryEntry, Outcome
from gitops.loop.quarantine_file import QuarantineFile
from gitops.reconcile.rollback import (
    Quarantine,
    RollbackReason,
    RollbackRefused,
    auto_revert_reason,
    commit_to_apply,
    quarantine,
)
from gitops.status.rollouts import aborted_entry, rollouts_moved, step_entries
from gitops.loop.metrics import AgentMetrics
from gitops.notifications.delivering import Notifier
from gitops.notifications.events import Event, EventKind, rollback_events
from gitops.reconcile.prune_guard import prune_refusal
from gitops.reconcile.plans import PendingPlan, Plan
from gitops.status.restarts import FailureLog, restart_lines
from gitops.status.ejections import EjectionsSeen
from gitops.sources.hashing import Tree
from gitops.sources.source import Revision, Source
from gitops.sources.watching import RefWatcher, backoff, jittered
from gitops.loop.statedir import private_file
from gitops.specs.documents import SpecError
from gitops.specs.loading import LoadResult
from gitops.loop.environment_duties import EnvironmentDuties, Served
from gitops.status.backend_health import ErrorLog
from gitops.status.rollup import AgentStatus, StatusFacts, SyncStatus, roll_up
from gitops.loop.ticks import (
    FULL_TRIGGERS,
    Stage,
    TickError,
    TickReport,
    Trigger,
    history_entry,
    log_line,
    notification_outcome,
    progress_line,
    write_metrics,
)
from vocabulary.spec.state import ServingState
from vocabulary.control.goal_api import GoalAPI
from vocabulary.control.status import ClusterStatus

__all__ = ["Agent", "AgentSettings", "Trigger", "Loader", "Planner"]

_LOG = logging.getLogger("gitops.agent")
# Step rows already recorded are looked for among this many newest rows.
_STEP_ROWS_SEEN = 200
_EJECTION_ROWS_SEEN = 200  # an agent that starts afresh knows the ejections it wrote before among these
SUSPENDED = "suspended"  # why the head waits, while the agent is suspended (`PendingPlan.why`)
Logger = logging.Logger | logging.LoggerAdapter

Loader = Callable[[Tree, str], LoadResult]  # (a revision's files, spec path)
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
    # After a transient error: retry after this, doubling, never later than the poll.
    retry_base_s: float = 1.0
    # After a failed apply (it would fail the same way again at once: a wrong model
    # digest, an __init__ that raises): retry after this, doubling, at most the
    # cap; no other wake-up but a new commit or `gitops sync` tries it sooner.
    apply_retry_base_s: float = 5.0
    apply_retry_max_s: float = 300.0
    # --auto-revert: after a failed apply or an aborted rollout, go back to the last
    # applied commit and hold the newer ones back (kept in `quarantine_file`).
    auto_revert: bool = False
    quarantine_file: Path | None = None
    # Between ticks, the controller's status is read this often, so handler errors
    # and request rates show within seconds (0: only at ticks).
    observe_interval_s: float = 2.0


@dataclass(frozen=True)
class _Applying:
    """The apply under way, for the status: which commit and its latest step."""

    revision: Revision
    progress: Progress | None = None


class Agent:
    def __init__(
        self,
        source: Source,
        client: GoalAPI,
        history: History,
        *,
        load: Loader,
        plan: Planner,
        metrics: AgentMetrics,
        settings: AgentSettings = AgentSettings(),
        log: Logger = _LOG,  # every event (reconcile, progress, errors) with its fields
        notifier: Notifier | None = None,  # told each tick's outcome; never waited for
        duties: EnvironmentDuties | None = None,  # --environment: sync windows and promotion
        traces: TraceSink | None = None,  # given each applied commit's trace (gitops.reconcile.apply_traces)
    ) -> None:
        self._notifier = notifier
        self._duties = duties
        self._traces = traces
        self._stages = StageClock()
        self._source = source
        self._client = client
        self._history = history
        self._ejections = EjectionsSeen()  # the outlier ejections the last status showed (gitops.status.ejections)
        self._load = load
        self._plan = plan
        self.metrics = metrics
        self._settings = settings
        self._log = log
        self._quarantines = QuarantineFile(settings.quarantine_file) if settings.quarantine_file else None
        self._quarantine = self._quarantines.load() if self._quarantines else None
        self._head: str | None = None  # the branch's newest commit, as last fetched
        self._announced: str | None = None  # the last commit announced as seen
        self._wake: asyncio.Event | None = None  # made by run(), on its own loop
        self._triggers: set[Trigger] = set()
        self._wakes = 0  # bumped by every wake-up; lets an apply notice news
        self._wakes_seen = 0
        marker = settings.suspend_marker
        self._suspended = marker is not None and marker.exists()
        self._last: TickReport | None = None  # the last finished tick
        self._watched: Revision | None = None  # the newest revision seen by any tick
        self._cluster: ClusterStatus | None = None  # the newest observed status
        self._pending: PendingPlan | None = None  # the plan of the head that waits (window, suspended, quarantine)
        self._applying: _Applying | None = None
        self._retries = 0  # transient failures in a row
        self._retry: asyncio.TimerHandle | None = None
        # A failed apply's commit and the monotonic time before which only a new commit
        # or `gitops sync` applies it again (the backoff's next try).
        self._apply_hold: tuple[str, float] | None = None
        self._failure_log = FailureLog()  # a replica failing the same way: one line per interval
        self.ticks = 0
        self.reconciled = asyncio.Event()  # set once the first tick is over: the agent is ready
        self._error_log = ErrorLog()  # when the log says a backend answers 5xx
        self._reads = 0  # controller status reads started, numbered (ticks' and the observer's)
        self._tick_read = 0  # the number of this tick's read
        self._read_taken = 0  # the number of the newest read taken in

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
            private_file(self._settings.suspend_marker)
        self._publish_status()
        self.notify(Trigger.POLL)  # the loop, suspended, reads the head and plans it (`watch_head`)

    def resume(self) -> None:
        self._suspended = False
        self._pending = None  # "suspended" no longer says why; the resumed tick plans what still waits
        if self._settings.suspend_marker is not None:
            self._settings.suspend_marker.unlink(missing_ok=True)
        self.notify(Trigger.SYNC)

    @property
    def suspended(self) -> bool:
        return self._suspended

    def status(self) -> AgentStatus:
        last, applying = self._last, self._applying
        return roll_up(
            StatusFacts(
                repo=self._source.location,
                branch=self._source.branch,
                path=self._settings.spec_path,
                suspended=self._suspended,
                watched=self._head or (self._watched.sha if self._watched else None),
                applying=applying.revision.sha if applying else None,
                progress=applying.progress.text() if applying and applying.progress else "",
                last_attempt=self._history.last(),
                last_applied=self._history.last_applied(),
                git_error=last.error(Stage.FETCH) if last else None,
                git_reason=last.reason(Stage.FETCH) if last else "",
                controller_error=last.error(Stage.CONTROLLER, Stage.TICK) if last else None,
                cluster=self._cluster,
                notifications=self._notifier.health() if self._notifier else None,
                quarantine=self._quarantine,
                environment=self._duties.status() if self._duties else None,
            )
        )

    def observed(self) -> ClusterStatus | None:
        """The newest status the controller reported; None before the first."""
        return self._cluster

    def history(self, limit: int = 50) -> list[HistoryEntry]:
        return self._history.recent(limit)

    def pending_plan(self) -> PendingPlan | None:
        """What applying the branch's head would do, while it waits unapplied: a sync window
        holds it, the agent is suspended or a rollback quarantined it (planned when last
        seen waiting; `why` says which); None when the head is applied or does not load."""
        return self._pending

    def record_action(self, action: Action) -> Action:
        """An admin API call that changed something: into the audit trail, the log and the notifications."""
        recorded = self._history.record_action(action)
        self._log.info("action: %s", recorded.describe())
        if self._notifier is not None:
            self._notifier.publish(Event(EventKind.ACTION, None, self._source.branch, self.status().status.value,
                                         (recorded.describe(),), actor=recorded.actor))
        return recorded

    def actions(self, limit: int = 50, actor: str | None = None, after: int = 0) -> list[Action]:
        """The audit trail, newest first."""
        return self._history.actions(limit, actor, after)

    def ejections(self, limit: int = 50) -> list[Ejection]:
        """The replicas proxies ejected as outliers, as the agent saw them, newest first."""
        return self._history.ejections(limit)

    # --- the loop ----------------------------------------------------------------

    async def run(self) -> None:
        """Reconcile until cancelled."""
        timers = [
            asyncio.create_task(self._every(self._settings.interval_s, Trigger.POLL, jitter=0.1)),
            asyncio.create_task(self._every(self._settings.resync_interval_s, Trigger.RESYNC, jitter=0.0)),
        ]
        if self._settings.observe_interval_s > 0:
            timers.append(asyncio.create_task(self._watch_cluster(self._settings.observe_interval_s)))
        watcher = self._start_watch()
        self._wake = wake = asyncio.Event()
        self.notify(Trigger.START)
        try:
            while True:
                await wake.wait()
                wake.clear()
                triggers, self._triggers = frozenset(self._triggers), set()
                if not self._suspended:
                    report = await self._guarded_tick(triggers)
                    self._schedule_retry(report)
                else:
                    await self.watch_head()
        finally:
            for timer in timers:
                timer.cancel()
            if self._retry is not None:
                self._retry.cancel()
            if watcher is not None:
                watcher.stop()
            self._wake = None

    async def _guarded_tick(self, triggers: frozenset[Trigger]) -> TickReport:
        """A tick that cannot end the loop: an unexpected error is shown and
        counted, and the next tick starts from scratch (level-triggered)."""
        started, clock = time.time(), time.monotonic()
        try:
            return await self._tick(triggers, full=bool(triggers & FULL_TRIGGERS))
        except Exception as error:  # noqa: BLE001 — the loop must outlive any one tick
            message = f"reconcile error: {type(error).__name__}: {error}"
            report = TickReport(
                triggers=triggers, full=True, started_at=started, duration_s=time.monotonic() - clock,
                errors=(TickError(Stage.TICK, ErrorKind.RETRY, message),),
            )
            self._finish(report)
            return report

    def _schedule_retry(self, report: TickReport) -> None:
        """A transient error or a failed apply is retried with backoff; anything else waits for news.

        Only a tick that reconciled without failing, or one stopped by an error no
        retry can help, ends a run of failures: a poll that finds the failed commit
        still at the head attempts nothing, and must not send the next retry back
        to the shortest delay. A failed apply backs off longer (from
        `apply_retry_base_s` up to `apply_retry_max_s`), says when it tries
        next, and holds its commit back from the ticks of other wake-ups until
        then (`_held_back`)."""
        if report.error_kind is not ErrorKind.RETRY:
            if report.attempted or report.stopped_by is not None:
                self._retries = 0
                self._apply_hold = None
            return
        self._retries += 1
        settings = self._settings
        failed_apply = report.attempted and report.revision is not None and report.error(Stage.APPLY) is not None
        if failed_apply:
            cap = max(settings.apply_retry_max_s, settings.interval_s)
            delay = jittered(backoff(self._retries, settings.apply_retry_base_s, cap), 0.2)
        elif report.attempted:
            self._apply_hold = None
            # Jittered, so that many agents behind one git host do not retry in step.
            delay = jittered(backoff(self._retries, settings.retry_base_s, settings.interval_s), 0.2)
        else:
            delay = jittered(backoff(self._retries, settings.retry_base_s, settings.interval_s), 0.2)
        if failed_apply and report.revision is not None:
            self._apply_hold = (report.revision.sha, time.monotonic() + delay)
            at = time.strftime("%H:%M:%S", time.localtime(time.time() + delay))
            self._log.warning(
                "%s failed to apply (%d in a row): next try in %.0fs, at %s, unless a new commit or "
                "`gitops sync` comes first", report.revision.short, self._retries, delay, at,
            )
        if self._retry is not None:
            self._retry.cancel()
        self._retry = asyncio.get_running_loop().call_later(delay, self.notify, Trigger.RETRY)

    def _held_back(self, commit: str, triggers: frozenset[Trigger]) -> bool:
        """Whether this tick leaves `commit` alone: it failed to apply and its next try
        (a RETRY wake-up) is not due yet; `gitops sync` and the agent's start go ahead."""
        if self._apply_hold is None or self._apply_hold[0] != commit:
            return False
        if triggers & {Trigger.RETRY, Trigger.SYNC, Trigger.START}:
            return False
        return time.monotonic() < self._apply_hold[1]

    async def _every(self, interval_s: float, trigger: Trigger, jitter: float) -> None:
        while True:
            await asyncio.sleep(jittered(interval_s, jitter))
            self.notify(trigger)

    async def _watch_cluster(self, interval_s: float) -> None:
        """The controller's status between ticks: what the status and the log say of
        replicas and requests is seconds old, not a reconcile old."""
        while True:
            await asyncio.sleep(interval_s)
            self._reads += 1
            read = self._reads
            try:
                observed = await self._client.get_status()
            except Exception:  # noqa: BLE001 — the next tick says the controller is unreachable
                continue
            before = self._cluster
            self._take_observed(observed, read)
            self._publish_status()
            if before is not None and self._cluster is observed and rollouts_moved(before.rollouts, observed.rollouts):
                # A step passed or a rollout stopped: its history row, notification and any
                # --auto-revert now (a tick records them), not at the next poll.
                self.notify(Trigger.POLL)

    def _take_observed(self, observed: ClusterStatus, read: int) -> None:
        """A newer observed status: its replica restarts and backends answering 5xx go to the log, its new
        outlier ejections to the history ledger and the log."""
        if read < self._read_taken:
            return  # a tick's reading, overtaken by the observer's newer one
        self._read_taken = read
        self._record_ejections(observed, time.time())
        for text in restart_lines(self._cluster, observed, self._failure_log, time.monotonic()):
            self._log.warning(text)
        self._cluster = observed
        for text in self._error_log.lines(self.status().backends, time.monotonic()):
            self._log.warning(text)

    def _start_watch(self) -> RefWatcher | None:
        refs_dir = self._source.refs_dir
        if not self._settings.watch or refs_dir is None:
            return None
        loop = asyncio.get_running_loop()

        def on_change() -> None:
            loop.call_soon_threadsafe(self.notify, Trigger.WATCH)

        watcher = RefWatcher(refs_dir, on_change)
        watcher.start()
        return watcher

    # --- one tick ------------------------------------------------------------------

    async def tick(self, full: bool = True) -> HistoryEntry | None:
        """One reconcile; returns what it amounts to, or None if nothing was attempted."""
        report = await self._tick(frozenset({Trigger.SYNC if full else Trigger.POLL}), full)
        return history_entry(report)

    async def _tick(self, triggers: frozenset[Trigger], full: bool) -> TickReport:
        self.ticks += 1
        clock = time.monotonic()
        report = TickReport(triggers=triggers, full=full, started_at=time.time())
        self._stages.reset()
        with self._stages.timed("fetch"):
            report = await self._fetch(report)
        if report.revision is not None:
            last = self._history.last()
            if (last is None or last.commit != report.revision.sha) and self._announced != report.revision.sha:
                self._announced = report.revision.sha
                self._announce(EventKind.SEEN, report.revision.sha)
            if (full or last is None or last.commit != report.revision.sha) and not self._held_back(
                report.revision.sha, triggers
            ):
                report = await self._reconcile(replace(report, attempted=True))
                if report.held_head is not None and self._quarantine is not None:
                    self._pending = await self._plan_head(report.held_head, self._quarantine.holding())
        report = await self._observe(report)
        report = replace(report, duration_s=time.monotonic() - clock)
        self._finish(report)
        if self._duties is not None:
            await self._promotion_step()
        return report

    async def _fetch(self, report: TickReport) -> TickReport:
        """The newest revision, or the good one of a quarantine that holds it back."""
        try:
            revision = await asyncio.to_thread(self._source.newest)
            self._head = revision.sha
            chosen, held = commit_to_apply(revision.sha, self._quarantine)
            if held is None and self._quarantine is not None:
                self._log.info("quarantine lifted: %s is newer than the held commits", revision.short)
                self._keep_quarantine(None)
            held_head = None
            if chosen != revision.sha:
                held_head = revision.sha
                revision = await asyncio.to_thread(self._source.revision, chosen)
        except SourceError as error:
            return _failed(report, Stage.FETCH, error.kind, str(error), error.reason)
        return replace(report, revision=revision, held_head=held_head)

    async def watch_head(self) -> None:
        """While suspended: read the branch's head (nothing is applied), so
        the status shows the commit waiting for `gitops resume`, and the
        status page its plan (none once the head is the applied commit)."""
        try:
            head = await asyncio.to_thread(self._source.newest)
        except SourceError:
            return  # shown once reconciliation resumes
        self._head = head.sha
        applied = self._history.last_applied()
        waiting = None
        if applied is None or applied.commit != head.sha:
            waiting = await self._plan_waiting(head, SUSPENDED)
        if self._suspended:  # not resumed meanwhile: the resumed tick says what waits
            self._pending = waiting

    def rollback(self, commit: str | None = None) -> Quarantine:
        """`gitops rollback [COMMIT]`: apply the last applied (or the given) commit's
        state and hold the newer ones back; raises `RollbackRefused` with the reason."""
        if self._head is None:
            raise RollbackRefused("the agent has not read the branch yet; try again in a moment")
        held = quarantine(self._history.recent(500), self._head, RollbackReason.MANUAL, requested=commit,
                          detail="gitops rollback")
        self._log.warning("rollback by hand: back to %s, holding %s", held.good[:7],
                          ", ".join(sorted(sha[:7] for sha in held.held)))
        self._keep_quarantine(held)
        self.metrics.rolled_back(RollbackReason.MANUAL.value)
        self._announce_rollback(self._head, held)
        self.notify(Trigger.SYNC)
        return held

    def _revert(self, recorded: HistoryEntry | None) -> None:
        """With --auto-revert: a failed or aborted commit sends the cluster back to the last applied one."""
        reason = auto_revert_reason(recorded.result.value) if recorded and self._settings.auto_revert else None
        if reason is None or recorded is None:
            return
        try:
            held = quarantine(self._history.recent(500), recorded.commit, reason, detail="; ".join(recorded.errors))
        except RollbackRefused as error:
            self._log.warning("auto-revert of %s not possible: %s", recorded.commit[:7], error)
            return
        self._log.warning("auto-revert (%s): back to %s, holding %s", reason.value, held.good[:7],
                          ", ".join(sorted(sha[:7] for sha in held.held)))
        self._keep_quarantine(held)
        self.metrics.rolled_back(reason.value)
        self._announce_rollback(recorded.commit, held)
        self.notify(Trigger.RETRY)

    def _announce(self, kind: EventKind, commit: str) -> None:
        """A commit's progress (seen, applying) to the commit-status providers, as it happens."""
        if self._notifier is not None:
            self._notifier.publish(Event(kind, commit, self._source.branch, self.status().status.value))

    def _announce_rollback(self, reverted: str, held: Quarantine) -> None:
        if self._notifier is None:
            return
        status = self.status().status.value
        for event in rollback_events(reverted, held.good, held.held, held.reason.value, self._source.branch, status):
            self._notifier.publish(event)

    def _keep_quarantine(self, held: Quarantine | None) -> None:
        self._quarantine = held
        if self._quarantines is not None:
            self._quarantines.save(held)

    async def _reconcile(self, report: TickReport) -> TickReport:
        revision = report.revision
        assert revision is not None
        if revision.unverified:
            return replace(report, reconciled_at=time.time())  # not applied: see its history row
        with self._stages.timed("load"):
            tree = await asyncio.to_thread(self._source.tree, revision)
            loaded = await asyncio.to_thread(self._load, tree, self._settings.spec_path)
        report = replace(report, loaded=loaded)
        if not loaded.ok or loaded.state is None:
            self._pending = None  # a newer commit that does not load: nothing of it waits to apply
            errors = tuple(TickError(Stage.LOAD, ErrorKind.STALLED, str(e)) for e in loaded.errors)
            return replace(report, errors=report.errors + errors, reconciled_at=time.time())
        if self._duties is not None and await self._held_by_window(loaded, revision):
            return replace(report, reconciled_at=time.time())  # no outcome: nothing recorded, the status says Held
        self._pending = None
        with self._stages.timed("plan"):
            try:
                actual = await self._client.get_state()
            except Exception as error:  # noqa: BLE001 — reported in status, retried with backoff
                return _failed(report, Stage.CONTROLLER, ErrorKind.RETRY, f"controller unavailable: {error}")
            refused = prune_refusal(loaded.state, actual, revision.prune_all)
            if refused is not None:  # a spec error of the whole tree: ValidationFailed, history `invalid`
                spec_error = SpecError(self._settings.spec_path, 1, 1, refused)
                refusal = TickError(Stage.LOAD, ErrorKind.STALLED, str(spec_error))
                return replace(report, loaded=LoadResult(None, (spec_error,)), actual=actual,
                               errors=report.errors + (refusal,), reconciled_at=time.time())
            nodes = self._cluster.nodes if self._cluster is not None else {}
            too_big = capacity_problems(loaded.state, nodes)
            if too_big:  # no node of the cluster could ever hold a replica: a spec error, never applied
                spec_errors = tuple(loaded.placement_error(name, problem) for name, problem in too_big.items())
                refusals = tuple(TickError(Stage.LOAD, ErrorKind.STALLED, str(e)) for e in spec_errors)
                return replace(report, loaded=LoadResult(None, spec_errors), actual=actual,
                               errors=report.errors + refusals, reconciled_at=time.time())
            plan = self._plan(loaded.state, actual)
        report = replace(report, actual=actual, plan=plan)
        if not plan:
            return replace(report, reconciled_at=time.time())
        with self._stages.timed("apply"):
            return await self._apply(report, revision, plan, actual)

    async def _apply(self, report: TickReport, revision: Revision, plan: Plan, actual: ServingState) -> TickReport:
        last_applied = self._history.last_applied()
        report = replace(report, applied_before=last_applied.commit if last_applied else None)
        if any(action.backend is not None for action in plan.actions):
            try:
                working_dir = str(await asyncio.to_thread(self._source.export, revision))
            except SourceError as error:
                return self._export_refused(report, error)
            report = replace(report, working_dir=working_dir)
        self._applying = _Applying(revision)
        self._announce(EventKind.APPLYING, revision.sha)
        try:
            result = await apply(
                plan,
                self._client,
                actual=actual,
                working_dir=report.working_dir,
                commit=revision.sha,
                deadlines=self._settings.deadlines,
                superseded=lambda: self._superseded(revision),
                on_progress=lambda progress: self._show_progress(revision, progress),
            )
        finally:
            self._applying = None
        if result.outcome is Outcome.FAILED and result.error:
            result = replace(result, error=f"{result.error}; {await self._undo(actual, report.applied_before)}")
        report = replace(report, applied=result, reconciled_at=time.time())
        if result.error:
            report = _failed(report, Stage.APPLY, ErrorKind.RETRY, result.error)
        return report

    async def _undo(self, before: ServingState, applied_before: str | None) -> str:
        """A commit applies whole or not at all: after a failed step, everything
        the plan changed goes back to `before` (what ran when the apply began:
        the last applied commit's state). Replicas started for the failed commit
        stop, replaced ones start again from their own export; the planner keeps
        every step safe (backends ready before traffic moves back). Returns
        what happened, for the failed attempt's error."""
        target = f"reverted to {applied_before[:7]}" if applied_before else "reverted to what ran before"
        try:
            now = await self._client.get_state()
        except Exception as error:  # noqa: BLE001 — the retry's plan starts from what runs
            return f"not reverted: controller unavailable: {error}"
        undo = self._plan(before, now)
        if not undo:
            return target
        self._log.warning("apply failed: %s (%s)", target, undo.summary().text())
        undone = await apply(undo, self._client, actual=now, deadlines=self._settings.deadlines)
        if undone.error:
            return f"{target.replace('reverted', 'reverting')} failed: {undone.error}"
        return target

    @staticmethod
    def _export_refused(report: TickReport, error: SourceError) -> TickReport:
        """A commit that cannot be exported (a link leading outside) fails before
        anything is changed; the refusal stands until a new commit."""
        failed = ApplyResult(Outcome.FAILED, error=str(error))
        report = replace(report, applied=failed, reconciled_at=time.time())
        return _failed(report, Stage.APPLY, ErrorKind.STALLED, str(error))

    # --- environments (gitops.loop.environment_duties) -------------------------------------

    def sync(self, override_window_by: str | None = None) -> None:
        """`gitops sync`; with `--override-window`, a commit a sync window holds is applied anyway."""
        if override_window_by is not None and self._duties is not None:
            self._duties.request_override(override_window_by)
        self.notify(Trigger.SYNC)

    async def _know_applied(self, commit: str) -> None:
        """Tell the duties the applied commit's environment settings, loading it when they lack them."""
        assert self._duties is not None
        if self._duties.knows_applied(commit):
            return
        try:
            tree = await asyncio.to_thread(self._source.tree, self._source.revision(commit))
            loaded = await asyncio.to_thread(self._load, tree, self._settings.spec_path)
        except Exception as error:  # noqa: BLE001 — a commit no longer fetched: the new commit's windows judge alone
            self._log.warning("%s: the applied commit's environment settings not read: %s", commit[:7], error)
            return
        self._duties.applied_settings(commit, loaded.environment)

    async def _held_by_window(self, loaded: LoadResult, revision: Revision) -> bool:
        assert self._duties is not None
        applied = self._history.last_applied()
        if applied is not None and applied.commit != revision.sha:
            await self._know_applied(applied.commit)
        held, override = self._duties.hold(loaded, revision.sha, applied.commit if applied else None)
        if override is not None:
            self._history.record(override)
            self._log.warning("%s: %s", revision.short, override.plan_summary)
        elif held is not None:
            self._log.info("%s held: %s", revision.short, held.message)
            self._pending = await self._plan_waiting(revision, f"held: {held.message}", loaded)
        return held is not None

    async def _plan_head(self, commit: str, why: str) -> PendingPlan | None:
        try:
            revision = await asyncio.to_thread(self._source.revision, commit)
        except SourceError:
            return None
        return await self._plan_waiting(revision, why)

    async def _plan_waiting(self, revision: Revision, why: str, loaded: LoadResult | None = None) -> PendingPlan | None:
        """The plan of a commit that waits (`why`) against what runs now, for the status page
        (the planning is `self._plan`'s); None if it does not load, is not verified, or the
        controller is away."""
        if revision.unverified:
            return None  # never loaded: its history row says why
        if loaded is None:
            try:
                tree = await asyncio.to_thread(self._source.tree, revision)
                loaded = await asyncio.to_thread(self._load, tree, self._settings.spec_path)
            except Exception:  # noqa: BLE001 — a plan for the page must never stop the loop (run() awaits it)
                return None
        if not loaded.ok or loaded.state is None:
            return None
        try:
            actual = await self._client.get_state()
        except Exception:  # noqa: BLE001 — the status says the controller is unreachable; the plan waits
            return None
        return PendingPlan(revision.sha, why, self._plan(loaded.state, actual).render_text())

    async def _promotion_step(self) -> None:
        """The served commit through the promotion gates; a promotion recorded and announced."""
        assert self._duties is not None
        applied = self._history.last_applied()
        if applied is None:
            return
        await self._know_applied(applied.commit)
        status = self.status().status
        synced = status is SyncStatus.SYNCED and self._watched is not None and self._watched.sha == applied.commit
        row = await self._duties.after_tick(Served(applied, synced, tuple(self._history.recent(_STEP_ROWS_SEEN))))
        if row is None:
            return
        recorded = self._history.record(row)
        self._log.info("%s %s", recorded.commit[:7], recorded.plan_summary)
        if self._notifier is not None:
            event = Event(EventKind.PROMOTED, recorded.commit, self._source.branch, status.value, (recorded.plan_summary,))
            self._notifier.publish(event)

    async def _superseded(self, applying: Revision) -> bool:
        """Newest commit wins: has the branch moved since this apply began?"""
        if self._wakes == self._wakes_seen:
            return False
        self._wakes_seen = self._wakes
        try:
            newest = await asyncio.to_thread(self._source.newest)
        except SourceError:
            return False
        return commit_to_apply(newest.sha, self._quarantine)[0] != applying.sha

    def _show_progress(self, revision: Revision, progress: Progress) -> None:
        self._applying = _Applying(revision, progress)
        text, fields = progress_line(revision.short, progress)
        self._log.info(text, extra=fields)

    async def _observe(self, report: TickReport) -> TickReport:
        self._reads += 1
        self._tick_read = self._reads
        try:
            observed = await self._client.get_status()
        except Exception as error:  # noqa: BLE001 — reported in status, retried with backoff
            return _failed(report, Stage.CONTROLLER, ErrorKind.RETRY, f"controller unavailable: {error}")
        return replace(report, observed=observed)

    # --- written once per tick, from its report -------------------------------------

    def _finish(self, report: TickReport) -> None:
        """History, metrics, the log line and the status: once per tick."""
        self._last = report
        self._watched = report.revision or self._watched
        if report.observed is not None:
            self._take_observed(report.observed, self._tick_read)
        recorded = self._write_history(report)
        write_metrics(self.metrics, report)
        line = log_line(report, recorded)
        if line is not None:
            self._log.log(line.level, line.text, extra=line.fields)
        self._prune_exports(report)
        self._publish_status()
        if self._notifier is not None:
            status = self.status().status.value
            watched = self._watched.sha if self._watched else None
            self._notifier.observe(notification_outcome(report, recorded, status, watched, self._source.branch))
        if self._traces is not None and report.applied is not None and report.revision is not None:
            applied = report.applied
            self._traces.record(
                apply_trace(report.revision.sha, applied.outcome.value, self._stages.stages, applied.goals, applied.error)
            )
        # After the tick's own result went out, so a rollback is announced after what caused it.
        self._revert(recorded)
        self.reconciled.set()

    def _write_history(self, report: TickReport) -> HistoryEntry | None:
        """Every new commit, every change made, every new failure; not repeats.
        Then each rollout step passed, and once a rollout the controller
        stopped, against the newest commit."""
        entry = history_entry(report)
        recorded = None
        if entry is not None and _worth_recording(entry, self._history.last()):
            recorded = self._history.record(entry)
        rollouts = report.observed.rollouts if report.observed is not None else {}
        for step in step_entries(rollouts, self._history.last_applied(), self._history.recent(_STEP_ROWS_SEEN)):
            self._history.record(step)
        stopped = aborted_entry(rollouts, self._history.last(), report.started_at + report.duration_s)
        return recorded if stopped is None else self._history.record(stopped)

    def _record_ejections(self, observed: ClusterStatus, now: float) -> None:
        """Each outlier ejection the controller's status shows for the first time: a row of its own, and a line."""
        self._ejections.seed(self._history.ejections(_EJECTION_ROWS_SEEN), now)
        for ejection in self._ejections.new(observed.backends, now):
            recorded = self._history.record_ejection(ejection)
            self._log.info("%s", recorded.describe())

    def _publish_status(self) -> None:
        self.metrics.sync_status(self.status().status.value)

    def _prune_exports(self, report: TickReport) -> None:
        """Drop exports that neither the old nor the new configs point at.

        Running replicas no longer need their export (Ray uploaded it when
        they were created), so one tick of grace is enough.
        """
        in_use = report.exports_in_use()
        if in_use is not None:
            self._source.prune_exports(in_use)


def _failed(report: TickReport, stage: Stage, kind: ErrorKind, message: str, reason: str = "") -> TickReport:
    return replace(report, errors=report.errors + (TickError(stage, kind, message, reason),))


def _worth_recording(entry: HistoryEntry, last: HistoryEntry | None) -> bool:
    """Every new commit, every change made, every new failure; not repeats."""
    if last is None or last.commit != entry.commit:
        return True
    if entry.result is Outcome.APPLIED or last.result is Outcome.WINDOW_OVERRIDE:  # the override's own outcome
        return True
    return (entry.result, entry.errors) != (last.result, last.errors) and entry.result is not Outcome.NOOP
