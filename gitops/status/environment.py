"""The environment part of the agent's status, as typed values. Pure.

`EnvironmentSummary` is what `AgentStatus.environment` carries with
`--environment`: the environment and its branch, the sync window holding
the newest commit (`HeldSummary`), and the promotion of the commit served
(`PromotionSummary`, each gate a `GateSummary`). `gitops.loop.environment_duties`
builds it; the admin API serves it inside `/status`; `gitops status`
(`gitops.status.environment_view`) and the status page show it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["GateSummary", "HeldSummary", "PromotionSummary", "EnvironmentSummary"]


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GateSummary(_Value):
    name: str
    passed: bool | None  # None: not decided yet
    detail: str


class HeldSummary(_Value):
    commit: str
    reason: str  # SyncWindow
    message: str
    until: str | None  # ISO 8601 UTC; None: no end within a week


class PromotionSummary(_Value):
    to: str
    branch: str
    mode: str
    commit: str | None
    phase: str  # Soaking | Ready | Promoted | Failed
    message: str
    soaked_s: float
    soak_s: float
    gates: tuple[GateSummary, ...] = ()
    error: str | None = None  # the last attempt's, while it is tried again


class EnvironmentSummary(_Value):
    name: str
    branch: str
    held: HeldSummary | None = None
    promotion: PromotionSummary | None = None
