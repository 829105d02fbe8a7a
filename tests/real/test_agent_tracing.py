"""`gitops run --otlp-endpoint`: a real agent (joined to the session's Ray), its
controller, proxy and replica export to a loopback OTLP/HTTP receiver; an applied
commit yields its trace, and a request's spans carry that commit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from tests.conftest import GitRepo
from tests.support.otlp import OtlpReceiver, ReceivedSpan
from tests.support.stack import AgentProcess

pytestmark = pytest.mark.real

APP = '''
class Echo:
    def __call__(self, request):
        return "echo"
'''
SPEC = '''[backends.echo-v1]
import_path = "apps.echo:Echo"
ray_actor_options = { num_cpus = 0.01 }
graceful_shutdown_timeout_s = 1

[endpoints.echo]
route = "/echo"
traffic = { "echo-v1" = 1.0 }
'''
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"


@pytest.fixture
def traced(ray_session: str, repo: GitRepo, tmp_path: Path) -> Iterator[tuple[AgentProcess, OtlpReceiver, str]]:
    import ray

    repo.write("apps/__init__.py", "")
    repo.write("apps/echo.py", APP)
    repo.write("deployments/echo.toml", SPEC)
    commit = repo.commit("echo")
    with OtlpReceiver() as receiver:
        agent = AgentProcess(repo.root, tmp_path, ray.get_runtime_context().gcs_address,
                             extra_args=["--otlp-endpoint", receiver.url])
        try:
            yield agent, receiver, commit
        finally:
            agent.stop()


def _agent_spans(spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
    return [span for span in spans if span.service == "gitops-agent"]


def test_an_apply_and_a_request_are_traced_with_the_commit(traced: tuple[AgentProcess, OtlpReceiver, str]) -> None:
    agent, receiver, commit = traced
    agent.wait_applied(commit)
    spans = _agent_spans(receiver.wait_for_spans(lambda found: any(
        s.name == "gitops.commit" for s in _agent_spans(found)
    )))
    (root,) = [s for s in spans if s.name == "gitops.commit"]
    assert root.parent_span_id == "" and root.attributes["gitops.commit"] == commit
    assert root.attributes["gitops.outcome"] == "applied"
    in_trace = [s for s in spans if s.trace_id == root.trace_id]
    stages = {s.name: s for s in in_trace if s.parent_span_id == root.span_id}
    assert set(stages) == {"gitops.fetch", "gitops.load", "gitops.plan", "gitops.apply"}
    goals = [s for s in in_trace if s.parent_span_id == stages["gitops.apply"].span_id]
    assert {s.name for s in goals} == {"gitops.goal create_backend echo-v1", "gitops.goal create_endpoint echo"}
    assert all(s.attributes["gitops.commit"] == commit for s in in_trace)
    # The agent keeps it too: `gitops trace COMMIT` asks its admin API.
    shown = subprocess.run(
        [sys.executable, "-m", "gitops", "trace", commit[:8], "--agent", agent.admin],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    assert shown.splitlines()[0] == f"commit {commit}"
    assert "gitops.goal create_backend echo-v1" in shown and "outcome=applied" in shown

    headers = {"traceparent": f"00-{TRACE_ID}-b7ad6b7169203331-01"}
    response = httpx.get(agent.proxy + "/echo", headers=headers, timeout=10)
    assert response.status_code == 200
    request = receiver.wait_for_spans(
        lambda found: {s.name for s in found if s.trace_id == TRACE_ID} >= {"proxy.request", "replica.request"}
    )
    mine = {s.name: s for s in request if s.trace_id == TRACE_ID}
    assert mine["replica.request"].parent_span_id == mine["proxy.request"].span_id
    for span in mine.values():
        assert span.attributes["gitops.commit"] == commit, span
        assert (span.attributes["gitops.endpoint"], span.attributes["gitops.backend"]) == ("echo", "echo-v1"), span
