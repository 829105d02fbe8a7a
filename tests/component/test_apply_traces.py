"""An applied commit's trace: the agent over an in-memory source and the fake
controller hands one trace per applied commit (fetch, load, plan, apply and each
goal) to its sink, and `gitops.process.tracing` turns it into OpenTelemetry spans with
the recorded times and parents."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Sequence

import httpx
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gitops.admin.auth.access import AccessPolicy
from gitops.admin.api import build_app
from gitops.commands.remote import render_trace
from gitops.loop.agent import Agent, AgentSettings
from gitops.loop.history import History
from gitops.loop.metrics import AgentMetrics
from gitops.process.tracing import OtlpTraceSink
from gitops.reconcile.apply_traces import APPLY_SPAN, SpanRecord, TraceRing, trace_json
from gitops.reconcile.planner import plan
from gitops.specs.loading import Loader
from gitops.testing import FakeController, MemorySource
from tests.support.admin import FakeAgent
from tests.support.agent_loop import spec, spec_repo  # noqa: F401 — the fixture
from tests.support.receivers import Receiver

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


def _trace(commit: str) -> list[SpanRecord]:
    return [
        SpanRecord(APPLY_SPAN, 10.0, 12.5, {"gitops.commit": commit, "gitops.outcome": "applied"}),
        SpanRecord("gitops.apply", 10.5, 12.5, {"gitops.commit": commit}, 0),
        SpanRecord("gitops.goal create_backend v1", 10.5, 12.0, {"gitops.commit": commit, "gitops.backend": "v1"}, 1),
    ]


def test_the_ring_keeps_the_last_traces_finds_them_by_commit_and_forwards_them() -> None:
    forwarded = Traces()
    ring = TraceRing(size=2, forward=forwarded)
    for commit in ("aaaa1111", "bbbb2222", "aaaa3333"):
        ring.record(_trace(commit))
    assert len(forwarded.traces) == 3
    assert [t[0].attributes["gitops.commit"] for t in ring.of_commit("AAAA")] == ["aaaa3333"]  # the oldest fell out
    assert ring.of_commit("bbbb2222")[0][2].name == "gitops.goal create_backend v1"
    assert ring.of_commit("cccc") == []


def test_the_admin_api_answers_a_commits_traces_behind_the_token_and_the_cli_prints_them() -> None:
    ring = TraceRing()
    ring.record(_trace("abcd1234"))
    app = build_app(
        FakeAgent(), sync=lambda: None, webhook_fetch=lambda: None, metrics=lambda: (b"", "text/plain"),
        policy=AccessPolicy.build(b"s3cret-token", "127.0.0.1"),
        apply_traces=lambda commit: [trace_json(t) for t in ring.of_commit(commit)],
    )

    async def get(path: str, token: str | None) -> httpx.Response:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            return await client.get(path, headers=headers)

    assert asyncio.run(get("/traces?commit=abcd", None)).status_code == 401
    assert asyncio.run(get("/traces?commit=zz", "s3cret-token")).status_code == 400
    answer = asyncio.run(get("/traces?commit=abcd", "s3cret-token"))
    assert answer.status_code == 200
    (trace,) = answer.json()["traces"]
    assert [span["parent"] for span in trace] == [None, 0, 1]
    text = render_trace(trace)
    lines = text.splitlines()
    assert lines[0] == "commit abcd1234"
    assert lines[2].split() == ["0.000s", "2.500s", APPLY_SPAN, "outcome=applied"]
    assert lines[4].split() == ["0.500s", "1.500s", "gitops.goal", "create_backend", "v1", "backend=v1"]
    assert lines[4].index("gitops.goal") > lines[3].index("gitops.apply") > lines[2].index(APPLY_SPAN)


@pytest.mark.parametrize("status,result", [(200, "exported"), (400, "failed")])
def test_each_export_is_counted_by_result(status: int, result: str) -> None:
    counted: list[tuple[str, int]] = []
    with Receiver(answers=(status,)) as receiver:
        sink = OtlpTraceSink(receiver.url, sent=lambda outcome, n: counted.append((outcome, n)))
        sink.record(_trace("abcd1234"))
        sink.close()
        (request,) = receiver.wait_for(1)
    assert request.path == "/v1/traces"
    assert counted == [(result, 3)]
