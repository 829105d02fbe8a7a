"""Which agent owns a controller (one agent per Ray namespace). Pure.

Owns the decision `claim` makes over the owner record
(`vocabulary.control.ownership.Owner`, which the controller keeps in its
checkpoint): a controller with no owner, or owned by the same agent id (the
same agent restarted: its id lives in its state dir), is granted; another
agent's is refused unless it takes over. Two agents reconciling one
namespace would delete each other's backends every tick. Must not: do I/O.
"""

from __future__ import annotations

from vocabulary.control.ownership import Owner

__all__ = ["claim"]


def claim(current: Owner | None, candidate: Owner, take_over: bool) -> Owner | None:
    """The owner that keeps the controller from `candidate`, or None if it is granted."""
    if current is None or current.agent_id == candidate.agent_id or take_over:
        return None
    return current
