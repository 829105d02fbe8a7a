"""Carry out a `Plan` against the controller's goal API, waiting for goals.

Owns the apply order's phases and their safety: backend creates/updates
first (their goals awaited together), then a readiness gate for every
backend that is about to receive traffic, then endpoint creates/updates,
then endpoint deletes, then backend deletes. It stops at the first failure
with an error naming the action, the object and the controller's reason
(the replica's own error text), and between goal waits it asks
`superseded()` so a newer commit wins at the next safe point instead of
queueing behind a long rollout. Every call is idempotent, so an apply cut
short (failure, supersede, agent killed) is finished by the next tick's
plan. Must not: plan, read git, or write status, history or metrics: what happened is
data, in the `ApplyResult` (the actions done, the failed action and why, how
long each goal took) and in the `Progress` values handed to `on_progress`.
"""

from __future__ import annotations

import asyncio
import enum
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Iterable, Sequence

from vocabulary.control.goal_api import GoalAPI
from vocabulary.control.goals import GoalResult, GoalState
from vocabulary.spec.state import ServingState
from gitops.reconcile.outcomes import Outcome
from gitops.reconcile.plans import Action, ActionKind, Plan

__all__ = [
    "Deadlines",
    "ApplyResult",
    "ApplyError",
    "GoalTook",
    "Progress",
    "ProgressKind",
    "apply",
    "describe",
]

_WAIT_STEP_S = 0.5  # how often a long goal wait looks up to check for a newer commit
_SLOW_GOAL_S = 2.0  # backend goals slower than this are reported as progress when met


@dataclass(frozen=True)
class Deadlines:
    """How long each kind of goal may take before the apply fails."""

    backend_s: float = 600.0
    endpoint_s: float = 30.0
    delete_backend_s: float = 120.0
    delete_endpoint_s: float = 30.0

    def for_kind(self, kind: ActionKind) -> float:
        if kind is ActionKind.DELETE_BACKEND:
            return self.delete_backend_s
        if kind is ActionKind.DELETE_ENDPOINT:
            return self.delete_endpoint_s
        return self.backend_s if kind.is_backend else self.endpoint_s




@dataclass(frozen=True)
class GoalTook:
    """How long one action's goal took to settle, for `gitops_goal_duration_seconds`."""

    kind: ActionKind
    seconds: float
    name: str = ""  # the backend or endpoint
    started_at: float = 0.0  # seconds since the epoch, when its wait began (for the apply's trace)


@dataclass(frozen=True)
class ApplyResult:
    outcome: Outcome
    done: tuple[Action, ...] = ()
    failed_action: Action | None = None  # the action that failed (FAILED only)
    error: str | None = None  # names the failed action and says why
    goals: tuple[GoalTook, ...] = ()


class ProgressKind(str, enum.Enum):
    WAITING = "waiting"  # a phase's goals were requested; the apply waits for them
    DONE = "done"  # a slow backend goal was met


@dataclass(frozen=True)
class Progress:
    """A step of a long apply: which actions it is about, as data."""

    kind: ProgressKind
    actions: tuple[Action, ...]
    elapsed_s: float = 0.0

    def text(self) -> str:
        if self.kind is ProgressKind.WAITING:
            return "waiting for " + ", ".join(describe(a) for a in self.actions)
        return f"{describe(self.actions[0])}: done in {self.elapsed_s:.1f} s"

    def backends(self) -> list[str]:
        """The backends the step is about, in the order of its actions."""
        return [a.name for a in self.actions if a.kind.is_backend]


class ApplyError(Exception):
    """One action could not be carried out; the message names it and says why."""

    def __init__(self, action: Action, reason: str) -> None:
        super().__init__(f"{describe(action)}: {reason}")
        self.action = action


Superseded = Callable[[], Awaitable[bool]]
OnProgress = Callable[[Progress], None]


class _Superseded(Exception):
    pass


def describe(action: Action) -> str:
    verb, _, noun = action.kind.value.partition("_")
    restart = " (rolling restart)" if action.restarts else ""
    return f"{verb} {noun} {action.name}{restart}"


async def apply(
    plan: Plan,
    client: GoalAPI,
    *,
    actual: ServingState,
    working_dir: str | None = None,
    commit: str | None = None,
    deadlines: Deadlines = Deadlines(),
    superseded: Superseded | None = None,
    on_progress: OnProgress | None = None,
) -> ApplyResult:
    """Run `plan` phase by phase; `actual` is the state the plan was made from.

    Each backend created or updated carries `working_dir` (the export of the
    commit) and `commit`, where its config now comes from."""
    run = _Run(client, deadlines, superseded, on_progress or (lambda progress: None))
    actions = [_from_source(a, working_dir, commit) for a in plan.actions]
    run.planned = {id(a) for a in actions}
    try:
        for phase in _phases(actions, actual):
            await run.phase(phase)
    except _Superseded:
        return ApplyResult(Outcome.SUPERSEDED, tuple(run.done), goals=tuple(run.goals))
    except ApplyError as error:
        return ApplyResult(
            Outcome.FAILED, tuple(run.done), failed_action=error.action, error=str(error), goals=tuple(run.goals)
        )
    return ApplyResult(Outcome.APPLIED, tuple(run.done), goals=tuple(run.goals))


def _from_source(action: Action, working_dir: str | None, commit: str | None) -> Action:
    source = {key: value for key, value in (("working_dir", working_dir), ("commit", commit)) if value is not None}
    if action.backend is None or not source:
        return action
    return action.model_copy(update={"backend": action.backend.model_copy(update=source)})


def _phases(actions: Sequence[Action], actual: ServingState) -> list[list[Action]]:
    """Runs of consecutive actions of one class, whose goals can be awaited together.

    The planner's order is kept exactly (it defers some backend updates
    until after endpoints and brings some deletes forward for route
    handoffs); only neighbours of the same class share a phase, and an
    action that waits for one of them (`Action.after`: a backend's callees)
    starts the next phase.
    """
    phases: list[list[Action]] = []
    for action in actions:
        if phases and _CLASS[phases[-1][0].kind] == _CLASS[action.kind] and not _waits_on(action, phases[-1]):
            phases[-1].append(action)
        else:
            phases.append([action])
    first_endpoint = next((i for i, p in enumerate(phases) if _CLASS[p[0].kind] == "endpoint"), None)
    if first_endpoint is not None:
        earlier = [a for phase in phases[:first_endpoint] for a in phase]
        later = [a for phase in phases[first_endpoint:] for a in phase]
        gate = _readiness_gate(later, earlier, actual)
        if gate:
            phases.insert(first_endpoint, gate)
    return phases


def _waits_on(action: Action, phase: list[Action]) -> bool:
    """`action` must start after a goal of `phase` is met (`Action.after`)."""
    return bool(action.after) and any(earlier.name in action.after for earlier in phase)


_CLASS = {
    ActionKind.CREATE_BACKEND: "backend",
    ActionKind.UPDATE_BACKEND: "backend",
    ActionKind.CREATE_ENDPOINT: "endpoint",
    ActionKind.UPDATE_ENDPOINT: "endpoint",
    ActionKind.DELETE_ENDPOINT: "delete_endpoint",
    ActionKind.DELETE_BACKEND: "delete_backend",
}


def _readiness_gate(endpoints: Iterable[Action], applied: Iterable[Action], actual: ServingState) -> list[Action]:
    """Re-assert (idempotently) each untouched backend that is about to get more traffic.

    A backend whose rollout failed earlier keeps its new config in the
    controller, so a later plan has no backend action for it; without this
    gate, traffic could be moved to it although none of its replicas is
    ready. The repeated call is a no-op for a ready backend and its goal is
    met at once. Backends whose share stays or shrinks need no gate.
    """
    covered = {a.name for a in applied if a.kind is not ActionKind.DELETE_BACKEND}
    needed: set[str] = set()
    for action in endpoints:
        if action.endpoint is None:
            continue
        before = actual.endpoints.get(action.name)
        old = before.traffic if before is not None else {}
        needed |= {name for name, w in action.endpoint.traffic.items() if w > old.get(name, 0.0)}
    return [
        Action(kind=ActionKind.UPDATE_BACKEND, name=name, backend=actual.backends[name])
        for name in sorted(needed - covered)
        if name in actual.backends
    ]


class _Run:
    def __init__(
        self, client: GoalAPI, deadlines: Deadlines, superseded: Superseded | None, on_progress: OnProgress
    ) -> None:
        self._client = client
        self._deadlines = deadlines
        self._superseded = superseded
        self._on_progress = on_progress
        self.done: list[Action] = []
        self.goals: list[GoalTook] = []
        self.planned: set[int] = set()  # ids of the plan's own actions (not the gate's)

    async def phase(self, actions: list[Action]) -> None:
        await self._check_superseded()
        goals = [(action, await self._call(action)) for action in actions]
        if any(a.kind.is_backend for a in actions):  # the slow ones: say what we wait for
            self._on_progress(Progress(ProgressKind.WAITING, tuple(actions)))
        waits = [asyncio.ensure_future(self._wait(action, goal)) for action, goal in goals]
        try:
            for finished in asyncio.as_completed(waits):
                action = await finished
                if id(action) in self.planned:
                    self.done.append(action)
        finally:
            for wait in waits:
                wait.cancel()
            await asyncio.gather(*waits, return_exceptions=True)

    async def _call(self, action: Action) -> str:
        try:
            if action.kind in (ActionKind.CREATE_BACKEND, ActionKind.UPDATE_BACKEND):
                return await self._client.apply_backend(action.backend_config())
            if action.kind in (ActionKind.CREATE_ENDPOINT, ActionKind.UPDATE_ENDPOINT):
                return await self._client.apply_endpoint(action.endpoint_config())
            if action.kind is ActionKind.DELETE_ENDPOINT:
                return await self._client.delete_endpoint(action.name)
            return await self._client.delete_backend(action.name)
        except Exception as error:  # noqa: BLE001 — the controller's refusal is the message
            raise ApplyError(action, f"controller refused: {_reason(error)}") from None

    async def _wait(self, action: Action, goal_id: str) -> Action:
        started, started_at = time.monotonic(), time.time()
        deadline = started + self._deadlines.for_kind(action.kind)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ApplyError(action, f"not done after {self._deadlines.for_kind(action.kind):g} s")
            try:
                result = await self._client.wait_for_goal(goal_id, min(remaining, _WAIT_STEP_S))
            except Exception as error:  # noqa: BLE001 — e.g. the controller died mid-wait
                raise ApplyError(action, f"lost the controller while waiting: {_reason(error)}") from None
            if result.state is not GoalState.PENDING:
                break
            await self._check_superseded()
        elapsed = time.monotonic() - started
        self.goals.append(GoalTook(action.kind, elapsed, action.name, started_at))
        settled = _settled(action, result)
        if action.kind.is_backend and elapsed >= _SLOW_GOAL_S:
            self._on_progress(Progress(ProgressKind.DONE, (action,), elapsed))
        return settled

    async def _check_superseded(self) -> None:
        if self._superseded is not None and await self._superseded():
            raise _Superseded()


def _settled(action: Action, result: GoalResult) -> Action:
    if result.state is GoalState.MET:
        return action
    if result.state is GoalState.SUPERSEDED:
        # Someone else (another agent, a manual call) changed it since: the
        # next tick re-reads the controller and plans again.
        raise ApplyError(action, f"superseded by another change to {action.name}")
    raise ApplyError(action, result.reason or "goal failed")


def _reason(error: Exception) -> str:
    """The controller's own message, without Ray's wrapping."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, Exception):
        error = cause
    text = str(error).strip().splitlines()
    return text[-1] if text else type(error).__name__
