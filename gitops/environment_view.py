"""The environment part of `gitops status` as text: its branch, a sync window's hold, the promotion.

Reads the `environment` mapping of `AgentStatus` (written by
`gitops.environment_duties`); the status page draws the same fields in its
own script (`gitops.statuspage`). Pure.
"""

from __future__ import annotations

from typing import Any, Mapping

__all__ = ["environment_lines"]


def environment_lines(environment: Mapping[str, Any] | None) -> list[str]:
    if not environment:
        return []
    lines = [f"Environment: {environment.get('name')}  branch {environment.get('branch')}"]
    held = environment.get("held")
    if isinstance(held, Mapping):
        lines.append(f"Held:        {str(held.get('commit'))[:12]} until {held.get('until') or '-'} ({held.get('reason')})")
    promotion = environment.get("promotion")
    if isinstance(promotion, Mapping):
        lines.append(
            f"Promotion:   to {promotion.get('to')} ({promotion.get('branch')}, {promotion.get('mode')}): "
            f"{promotion.get('phase')} {str(promotion.get('commit') or '-')[:12]}, "
            f"soaked {promotion.get('soaked_s')}s of {promotion.get('soak_s')}s"
        )
        for gate in promotion.get("gates") or ():
            passed = {True: "passed", False: "failed"}.get(gate.get("passed"), "pending")
            lines.append(f"  {gate.get('name')}: {passed} ({gate.get('detail')})")
        if promotion.get("error"):
            lines.append(f"  last attempt failed: {promotion.get('error')}")
    return lines
