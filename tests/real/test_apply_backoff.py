"""A commit whose backend fails to start the same way at every try (its `__init__` raises, as with
a wrong model digest) is retried with growing delays, and the agent's log says so in a few lines:
when the next try is, and one line per kind of replica failure per interval, not one per replica
start (issue 49 row 5). A real `gitops run` joined to the session's Ray; its log counted over 50 s."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest
import ray

from tests.conftest import GitRepo
from tests.support.stack import AgentProcess

pytestmark = pytest.mark.real

GOOD = '''\
class Good:
    def __call__(self, request):
        return "good"
'''
BAD = '''\
class Bad:
    def __init__(self):
        raise RuntimeError("model weights: sha256 mismatch")

    def __call__(self, request):
        return "never"
'''
SPEC = '''\
[backends.good]
import_path = "deployments.good:Good"
ray_actor_options = {{ num_cpus = 0.1 }}
{bad}
[endpoints.hello]
route = "/hello"
traffic = {traffic}
'''
BAD_BACKEND = '''
[backends.bad]
import_path = "deployments.bad:Bad"
ray_actor_options = { num_cpus = 0.1 }
'''
WINDOW_S = 50.0


def test_a_commit_failing_the_same_way_backs_off_and_is_said_once_per_kind(
    ray_session: str, repo: GitRepo, tmp_path: Path
) -> None:
    repo.write("deployments/__init__.py", "")
    repo.write("deployments/good.py", GOOD)
    repo.write("deployments/bad.py", BAD)
    repo.write("deployments/hello.toml", SPEC.format(bad="", traffic="{ good = 1.0 }"))
    good = repo.commit("good")
    agent = AgentProcess(repo.root, tmp_path, ray.get_runtime_context().gcs_address)
    try:
        agent.wait_applied(good)
        before = len(agent.log_path.read_text().splitlines())
        repo.write("deployments/hello.toml", SPEC.format(bad=BAD_BACKEND, traffic="{ good = 0.5, bad = 0.5 }"))
        bad = repo.commit("half the traffic to a backend that cannot start")
        agent.wait_attempted(bad)
        time.sleep(WINDOW_S)
        assert agent.process.poll() is None, agent.log_tail()
        lines = agent.log_path.read_text().splitlines()[before:]
        # What served before keeps serving: each failed try was reverted.
        answers = {httpx.get(f"{agent.proxy}/hello", timeout=10).text for _ in range(10)}
        assert answers == {'"good"'} or answers == {"good"}, answers
    finally:
        agent.stop()
    log = "\n".join(lines)
    tries = [int(m[1]) for m in re.finditer(rf"{bad[:7]} failed to apply \(\d+ in a row\): next try in (\d+)s", log)]
    # 5, 10, 20 s (each +-20%): growing; an apply takes seconds of its own, so 2 to 4 in the window.
    assert 2 <= len(tries) <= 4, log
    assert all(later > earlier for earlier, later in zip(tries, tries[1:])) and tries[0] >= 4, log
    started = [line for line in lines if "of backend bad " in line and "a replacement starts" in line]
    # Every try starts and loses several replicas; each kind (failed to start, died) is said once.
    assert 1 <= len(started) <= 2, log
    assert "model weights: sha256 mismatch" in started[0], log
