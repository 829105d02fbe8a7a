"""Sync windows: whether an environment may apply a new commit now, and until when not.

A window opens at each minute its cron `schedule` fires, in its `timezone`
(the `zoneinfo` database), and stays open `duration_s` seconds. As in Argo
CD: while a `deny` window is open nothing new is applied; when an
environment has `allow` windows, new commits are applied only while one of
them is open. A held commit waits (`Held`, reason `SyncWindow`) until the
window's end, or until `gitops sync --override-window` applies it anyway.

Pure: the clock is passed in; the windows come from the environment file
(`gitops.specs.environments`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta, UTC
from zoneinfo import ZoneInfo

from gitops.delivery.cron import Cron

__all__ = ["WindowKind", "SyncWindow", "Hold", "hold_at"]

# How far ahead an allow-only environment looks for its next window.
_LOOK_AHEAD = timedelta(days=8)


class WindowKind(str, enum.Enum):
    DENY = "deny"
    ALLOW = "allow"


@dataclass(frozen=True)
class SyncWindow:
    kind: WindowKind
    schedule: str
    cron: Cron
    duration_s: float
    timezone: str

    def open_at(self, now: datetime) -> tuple[datetime, datetime] | None:
        """(start, end) in UTC of the occurrence open at `now` (aware), or None."""
        local = now.astimezone(ZoneInfo(self.timezone))
        length = timedelta(seconds=self.duration_s)
        start = self.cron.last_start(local, length)
        if start is None:
            return None
        start_utc = start.astimezone(UTC)
        end = start_utc + length
        return (start_utc, end) if start_utc <= now < end else None

    def next_open(self, now: datetime) -> datetime | None:
        """When this window next opens after `now`, in UTC, within a week and a day."""
        local = now.astimezone(ZoneInfo(self.timezone))
        start = self.cron.next_start(local, _LOOK_AHEAD)
        return None if start is None else start.astimezone(UTC)

    def describe(self) -> str:
        return f"{self.kind.value} '{self.schedule}' for {self.duration_s:g}s ({self.timezone})"


@dataclass(frozen=True)
class Hold:
    """New commits wait: `until` is when they may apply (None: not within a week)."""

    reason: str
    message: str
    until: datetime | None


def hold_at(windows: tuple[SyncWindow, ...], now: datetime) -> Hold | None:
    """Why nothing new may be applied at `now` (aware), or None when it may."""
    denying = [(window, span) for window in windows if window.kind is WindowKind.DENY for span in [window.open_at(now)] if span]
    if denying:
        until = max(end for _, span in denying for end in [span[1]])
        window = denying[0][0]
        return Hold("SyncWindow", f"deny window {window.describe()} is open until {_iso(until)}", until)
    allowing = [window for window in windows if window.kind is WindowKind.ALLOW]
    if not allowing or any(window.open_at(now) for window in allowing):
        return None
    nexts = [start for window in allowing for start in [window.next_open(now)] if start is not None]
    opens = min(nexts) if nexts else None
    when = f"the next allow window opens at {_iso(opens)}" if opens else "no allow window opens within a week"
    return Hold("SyncWindow", f"outside every allow window: {when}", opens)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
