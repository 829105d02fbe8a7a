"""The environment part of `gitops status` as text: its branch, a sync window's hold, the promotion.

Reads `AgentStatus.environment` (`gitops.status.environment`); the status
page draws the same fields in its own script (`gitops.admin.page`). Pure.
"""

from __future__ import annotations

from gitops.status.environment import EnvironmentSummary

__all__ = ["environment_lines"]

_PASSED = {True: "passed", False: "failed", None: "pending"}


def environment_lines(environment: EnvironmentSummary | None) -> list[str]:
    if environment is None:
        return []
    lines = [f"Environment: {environment.name}  branch {environment.branch}"]
    held = environment.held
    if held is not None:
        lines.append(f"Held:        {held.commit[:12]} until {held.until or '-'} ({held.reason})")
    promotion = environment.promotion
    if promotion is not None:
        lines.append(
            f"Promotion:   to {promotion.to} ({promotion.branch}, {promotion.mode}): "
            f"{promotion.phase} {(promotion.commit or '-')[:12]}, soaked {promotion.soaked_s:g}s of {promotion.soak_s:g}s"
        )
        lines += [f"  {gate.name}: {_PASSED[gate.passed]} ({gate.detail})" for gate in promotion.gates]
        if promotion.error:
            lines.append(f"  last attempt failed: {promotion.error}")
    return lines
