"""An apply's trace as data: the stages of one reconcile and its goals, timed.

Owns what an applied commit's trace says, not how it is sent: `StageClock`
times the agent's stages (fetch, load, plan, apply) with one context manager
each, and `apply_trace` turns them and the apply's goals
(`gitops.reconcile.applying.GoalTook`) into `SpanRecord`s: a root `gitops.commit` span
for the commit, a span per stage under it, and a span per goal under the
apply stage. Every span carries `gitops.commit`; a goal's span its backend or
endpoint. `gitops.process.tracing` exports them over OTLP; the records are plain
values, so `TraceRing` keeps the recent ones for `gitops trace COMMIT`. Wall-clock seconds
throughout (a trace is read against other clocks).
"""

from __future__ import annotations

import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping, Protocol, Sequence

from gitops.reconcile.applying import GoalTook

__all__ = ["SpanRecord", "Stage", "StageClock", "TraceSink", "TraceRing", "apply_trace", "trace_json", "APPLY_SPAN"]

APPLY_SPAN = "gitops.commit"  # the root: one applied commit
Attribute = str | int | float | bool


@dataclass(frozen=True)
class SpanRecord:
    name: str
    start_s: float  # seconds since the epoch
    end_s: float
    attributes: Mapping[str, Attribute] = field(default_factory=dict)
    parent: int | None = None  # the index of its parent in the trace's records; None: the root


@dataclass(frozen=True)
class Stage:
    name: str
    start_s: float
    end_s: float


class StageClock:
    """The stages of the tick under way, timed as they run."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self.stages: list[Stage] = []

    def reset(self) -> None:
        self.stages = []

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        start = self._clock()
        try:
            yield
        finally:
            self.stages.append(Stage(name, start, self._clock()))


def apply_trace(
    commit: str, outcome: str, stages: Sequence[Stage], goals: Sequence[GoalTook], error: str | None = None
) -> list[SpanRecord]:
    """The spans of one applied commit: root, stages in order, goals under the apply stage."""
    if not stages:
        return []
    start, end = min(s.start_s for s in stages), max(s.end_s for s in stages)
    root: dict[str, Attribute] = {"gitops.commit": commit, "gitops.outcome": outcome}
    if error:
        root["gitops.error"] = error
    records = [SpanRecord(APPLY_SPAN, start, end, root)]
    apply_index = 0
    for stage in stages:
        records.append(SpanRecord(f"gitops.{stage.name}", stage.start_s, stage.end_s, {"gitops.commit": commit}, 0))
        if stage.name == "apply":
            apply_index = len(records) - 1
    for goal in goals:
        kind = goal.kind.value
        noun = "gitops.backend" if goal.kind.is_backend else "gitops.endpoint"
        attributes: dict[str, Attribute] = {"gitops.commit": commit, "gitops.goal": kind, noun: goal.name}
        started = goal.started_at or records[apply_index].start_s
        records.append(SpanRecord(f"gitops.goal {kind} {goal.name}", started, started + goal.seconds, attributes,
                                  apply_index))
    return records


class TraceSink(Protocol):
    """Where the agent hands each applied commit's trace (`gitops.process.tracing.OtlpTraceSink`)."""

    def record(self, records: Sequence[SpanRecord]) -> None:
        """Take one trace; never blocks the loop (an exporter sends it on its own thread)."""


class TraceRing:
    """The agent's recent apply traces, in memory (`gitops trace COMMIT`), each
    also handed to `forward` (the OTLP sink) when there is one."""

    def __init__(self, size: int = 50, forward: TraceSink | None = None) -> None:
        self._traces: deque[tuple[SpanRecord, ...]] = deque(maxlen=size)
        self._forward = forward

    def record(self, records: Sequence[SpanRecord]) -> None:
        if records:
            self._traces.append(tuple(records))
        if self._forward is not None:
            self._forward.record(records)

    def of_commit(self, prefix: str) -> list[tuple[SpanRecord, ...]]:
        """The kept traces of the commits starting with `prefix`, oldest first."""
        prefix = prefix.lower()
        return [t for t in self._traces if str(t[0].attributes.get("gitops.commit", "")).startswith(prefix)]


def trace_json(records: Sequence[SpanRecord]) -> list[dict[str, object]]:
    """One trace as the admin API answers it."""
    return [
        {"name": r.name, "start": r.start_s, "end": r.end_s, "parent": r.parent, "attributes": dict(r.attributes)}
        for r in records
    ]
