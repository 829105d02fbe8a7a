"""A notifier that records what it was sent, for the agent tests.

Moved out of tests/component/test_agent_notifications.py, whose tests use them too."""

from __future__ import annotations

from typing import Any

from gitops.notifications.events import Event, EventKind, TickOutcome, events_for
from tests.support.agent_loop import spec, spec_repo, tick  # noqa: F401 (spec_repo: fixture)


class RecordingNotifier:
    """Stands in for `Notifier`: keeps every event, those announced and those of each tick's outcome."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._previous: TickOutcome | None = None

    def publish(self, event: Event) -> None:
        self.events.append(event)

    def observe(self, outcome: TickOutcome) -> None:
        self.events += events_for(self._previous, outcome)
        self._previous = outcome

    def health(self) -> dict[str, Any]:
        return {}

    def kinds(self, commit: str) -> list[EventKind]:
        return [event.kind for event in self.events if event.commit == commit]
