"""What a goal of the controller's goal API (`vocabulary.control.goal_api`) comes to.

`GoalState` (pending, met, failed, superseded) and `GoalResult`. Values only.
"""

from __future__ import annotations

import enum

from vocabulary.spec.base import Value

__all__ = [
    "GoalState",
    "GoalResult",
]


class GoalState(str, enum.Enum):
    PENDING = "pending"
    MET = "met"
    FAILED = "failed"
    SUPERSEDED = "superseded"


class GoalResult(Value):
    goal_id: str
    state: GoalState
    reason: str = ""
