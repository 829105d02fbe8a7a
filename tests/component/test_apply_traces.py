"""An applied commit's trace: the agent over an in-memory source and the fake
controller hands one trace per applied commit (fetch, load, plan, apply and each
goal) to its sink, and `gitops.tracing` turns it into OpenTelemetry spans with
the recorded times and parents."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Sequence

from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gitops.agent import Agent, AgentSettings
from gitops.apply_traces import APPLY_SPAN, SpanRecord
from gitops.history import History
from gitops.metrics import AgentMetrics
from gitops.planning import plan
from gitops.specs.loading import Loader
from gitops.testing import FakeController, MemorySource
from gitops.tracing import OtlpTraceSink
from tests.component.test_agent_loop import spec, spec_repo  # noqa: F401 — the fixture

__all__ = ["spec_repo"]


class Traces:
    def __init__(self) -> None:
        self.traces: list[list[SpanRecord]] = []

    def record(self, records: Sequence[SpanRecord]) -> None:
        self.traces.append(list(records))


def _agent(source: MemorySource, tmp_path: Path, traces: Traces) -> Agent:
    return Agent(
        source, FakeController(), History(tmp_path / "history.db"), load=Loader().load_tree, plan=plan,
        metrics=AgentMetrics(), settings=AgentSettings(interval_s=30.0, resync_interval_s=60.0), traces=traces,
    )


def test_each_applied_commit_yields_one_trace_of_its_stages_and_goals(spec_repo: MemorySource, tmp_path: Path) -> None:
    traces = Traces()
    agent = _agent(spec_repo, tmp_path, traces)
    asyncio.run(agent.tick())
    asyncio.run(agent.tick())  # nothing to apply: no trace
    assert len(traces.traces) == 1
    (trace,) = traces.traces
    sha = spec_repo.newest().sha
    root = trace[0]
    assert (root.name, root.parent, root.attributes["gitops.commit"], root.attributes["gitops.outcome"]) == (
        APPLY_SPAN, None, sha, "applied"
    )
    stages = [r.name for r in trace if r.parent == 0]
    assert stages == ["gitops.fetch", "gitops.load", "gitops.plan", "gitops.apply"]
    apply_index = next(i for i, r in enumerate(trace) if r.name == "gitops.apply")
    goals = {r.name: r for r in trace if r.parent == apply_index}
    assert set(goals) == {"gitops.goal create_backend v1", "gitops.goal create_backend v2", "gitops.goal create_endpoint echo"}
    assert goals["gitops.goal create_backend v1"].attributes["gitops.backend"] == "v1"
    assert goals["gitops.goal create_endpoint echo"].attributes["gitops.endpoint"] == "echo"
    for record in trace:
        assert record.attributes["gitops.commit"] == sha
        assert root.start_s <= record.start_s <= record.end_s
    spec_repo.write("deployments/echo.toml", spec({"v1": 0.5, "v2": 0.5}))
    spec_repo.commit("split")
    asyncio.run(agent.tick())
    assert len(traces.traces) == 2 and traces.traces[1][0].attributes["gitops.commit"] == spec_repo.newest().sha


def test_the_otlp_sink_keeps_the_recorded_times_and_parents() -> None:
    exporter = InMemorySpanExporter()
    sink = OtlpTraceSink(processor=SimpleSpanProcessor(exporter))
    sink.record([
        SpanRecord(APPLY_SPAN, 100.0, 103.0, {"gitops.commit": "abc"}),
        SpanRecord("gitops.apply", 101.0, 103.0, {"gitops.commit": "abc"}, 0),
        SpanRecord("gitops.goal create_backend v1", 101.5, 102.5, {"gitops.commit": "abc", "gitops.error": "x"}, 1),
    ])
    sink.close()
    spans = {span.name: span for span in exporter.get_finished_spans()}
    root, stage, goal = spans[APPLY_SPAN], spans["gitops.apply"], spans["gitops.goal create_backend v1"]
    assert root.parent is None
    assert stage.parent is not None and root.context is not None and stage.parent.span_id == root.context.span_id
    assert goal.parent is not None and stage.context is not None and goal.parent.span_id == stage.context.span_id
    assert (goal.start_time, goal.end_time) == (101_500_000_000, 102_500_000_000)
    assert len({span.context.trace_id for span in spans.values() if span.context is not None}) == 1
    assert not goal.status.is_ok
