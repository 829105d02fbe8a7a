"""One agent per namespace (issue 11 row 10): two real agents, one Ray.

Agent A owns a namespace; agent B (its own state dir, same namespace) is
refused at start with one line naming A; agent C with `--take-over` gets
the namespace and A, seeing it, stops. Real Ray (the session's), real CLI.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from controller.client import connect
from tests.conftest import GitRepo
from tests.support.stack import AgentProcess, free_port

pytestmark = pytest.mark.real


@pytest.fixture
def namespace(ray_session: str) -> Iterator[str]:
    name = f"sec-ns-{uuid.uuid4().hex[:8]}"
    yield name
    try:
        connect(name).shutdown()
    except LookupError:
        pass


def started(repo: GitRepo, root: Path, namespace: str, *extra: str) -> AgentProcess:
    import ray

    root.mkdir()
    agent = AgentProcess(repo.root, root, ray.get_runtime_context().gcs_address, ["--namespace", namespace, *extra])
    agent.wait("the first apply", lambda: agent.get("/status")["last_applied_revision"] == repo.head())
    return agent


def test_a_second_agent_is_refused_naming_the_owner_and_one_taking_over_stops_the_first(
    namespace: str, tmp_path: Path
) -> None:
    import ray

    repo = GitRepo(tmp_path / "repo")
    repo.write("deployments/empty.toml", "")
    repo.commit("nothing to serve")
    first = started(repo, tmp_path / "a", namespace)
    try:
        owner_id = (tmp_path / "a" / "state" / "agent_id").read_text().strip()
        refused = subprocess.run(
            [sys.executable, "-m", "gitops", "run", "--repo", str(repo.root),
             "--ray-address", ray.get_runtime_context().gcs_address, "--namespace", namespace,
             "--admin-port", str(free_port()), "--proxy-port", str(free_port()),
             "--state-dir", str(tmp_path / "b" / "state")],
            capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        lines = [line for line in refused.stderr.splitlines() if line.strip()]
        assert refused.returncode == 1, refused.stderr
        assert len(lines) == 1, refused.stderr
        assert f"agent {owner_id}" in lines[0]
        # The pid of the process that reconciles: the agent started here, or
        # (joined to a cluster, supervised) the agent process it runs.
        named = int(re.search(r"\(pid (\d+) ", lines[0]).group(1))
        assert first.process.pid in (named, _parent_of(named)), lines[0]
        assert "--take-over" in lines[0]

        second = started(repo, tmp_path / "c", namespace, "--take-over")
        try:
            first.process.wait(60)
            assert "was taken over by agent" in first.log_path.read_text()
            assert second.process.poll() is None
        finally:
            second.stop()
    finally:
        first.stop()


def _parent_of(pid: int) -> int:
    """A live process's parent pid, from /proc."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])
