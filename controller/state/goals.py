"""Goals: what a state-changing call asked for, as a predicate to re-check.

Owns the goal table: creating goals (idempotently: an identical request
returns the same pending or met goal), resolving them from a judge's
verdicts every tick, remembering final results for `wait_for_goal`, and the
JSON form that goes into the checkpoint. A goal is never a future: after a
controller restart the pending ones are judged again from observed state.

What "met" means for each kind is the judge's business (see
`controller.state.judging`); this module stays pure and knows no Ray.
"""

from __future__ import annotations

import enum
import uuid
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any, Callable

from vocabulary.control.goals import GoalResult, GoalState

__all__ = ["GoalKind", "Goal", "Judgement", "GoalTable", "PENDING"]

_KEEP_FINISHED = 2000


class GoalKind(str, enum.Enum):
    BACKEND_READY = "backend_ready"
    BACKEND_DELETED = "backend_deleted"
    ENDPOINT_ACKED = "endpoint_acked"
    ENDPOINT_DELETED = "endpoint_deleted"


@dataclass(frozen=True)
class Goal:
    goal_id: str
    kind: GoalKind
    name: str
    fingerprint: str
    created_at: float


@dataclass(frozen=True)
class Judgement:
    state: GoalState
    reason: str = ""


PENDING = Judgement(GoalState.PENDING)


@dataclass(frozen=True)
class _Finished:
    goal: Goal
    state: GoalState
    reason: str
    finished_at: float


class GoalTable:
    def __init__(self) -> None:
        self._pending: dict[str, Goal] = {}
        self._finished: OrderedDict[str, _Finished] = OrderedDict()

    def request(
        self, kind: GoalKind, name: str, fingerprint: str, now: float,
        judge: Callable[[Goal], Judgement] | None = None,
    ) -> str:
        """The goal for this exact request: reuse a pending one, or a met one
        that `judge` still finds met (the same config deleted and created again
        is a new goal, not the old success)."""
        for goal in self._pending.values():
            if (goal.kind, goal.name, goal.fingerprint) == (kind, name, fingerprint):
                return goal.goal_id
        for done in reversed(self._finished.values()):
            goal = done.goal
            if (goal.kind, goal.name, goal.fingerprint) == (kind, name, fingerprint):
                still_met = judge is None or judge(goal).state == GoalState.MET
                if done.state == GoalState.MET and still_met:
                    return goal.goal_id
                break
        goal = Goal(uuid.uuid4().hex, kind, name, fingerprint, now)
        self._pending[goal.goal_id] = goal
        return goal.goal_id

    def evaluate(self, judge: Callable[[Goal], Judgement], now: float) -> list[str]:
        """Judge every pending goal; final verdicts are recorded for good."""
        resolved: list[str] = []
        for goal in list(self._pending.values()):
            verdict = judge(goal)
            if verdict.state != GoalState.PENDING:
                self._finish(goal, verdict, now)
                resolved.append(goal.goal_id)
        return resolved

    def _finish(self, goal: Goal, verdict: Judgement, now: float) -> None:
        del self._pending[goal.goal_id]
        self._finished[goal.goal_id] = _Finished(goal, verdict.state, verdict.reason, now)
        while len(self._finished) > _KEEP_FINISHED:
            self._finished.popitem(last=False)

    def result(self, goal_id: str) -> GoalResult | None:
        if goal_id in self._pending:
            return GoalResult(goal_id=goal_id, state=GoalState.PENDING)
        done = self._finished.get(goal_id)
        if done is None:
            return None
        return GoalResult(goal_id=goal_id, state=done.state, reason=done.reason)

    def pending(self) -> list[Goal]:
        return list(self._pending.values())

    def durations(self) -> list[dict[str, Any]]:
        """Finished goals with how long each took, for metrics."""
        return [
            {
                "goal_id": d.goal.goal_id,
                "kind": d.goal.kind.value,
                "name": d.goal.name,
                "state": d.state.value,
                "duration_s": max(0.0, d.finished_at - d.goal.created_at),
            }
            for d in self._finished.values()
        ]

    # --- checkpoint form ----------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "pending": [_goal_json(g) for g in self._pending.values()],
            "finished": [
                {**_goal_json(d.goal), "state": d.state.value, "reason": d.reason,
                 "finished_at": d.finished_at}
                for d in list(self._finished.values())[-200:]
            ],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GoalTable:
        table = cls()
        for item in data.get("pending", []):
            goal = _goal_from(item)
            table._pending[goal.goal_id] = goal
        for item in data.get("finished", []):
            goal = _goal_from(item)
            table._finished[goal.goal_id] = _Finished(
                goal, GoalState(item["state"]), item.get("reason", ""), item["finished_at"]
            )
        return table


def _goal_json(goal: Goal) -> dict[str, Any]:
    data = asdict(goal)
    data["kind"] = goal.kind.value
    return data


def _goal_from(item: dict[str, Any]) -> Goal:
    return Goal(
        goal_id=item["goal_id"],
        kind=GoalKind(item["kind"]),
        name=item["name"],
        fingerprint=item["fingerprint"],
        created_at=float(item["created_at"]),
    )
