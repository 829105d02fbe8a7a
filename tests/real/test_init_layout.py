"""The layout `gitops init` makes, served by a real agent: spec edits apply in place.

`deployments/hello.toml` lies beside `deployments/hello.py`, the code it
serves. A replica-count change, the tutorial's canary (a second backend and
a traffic split) and its `git revert` must never restart `hello-v1`: its
replica keeps its process. Real git, the real agent (`gitops run`), the
session's Ray. Also times each commit -> served step.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import ray

from controller.state.backend_state import REPLICA_PREFIX
from gitops.commands.init import SCAFFOLD, write_scaffold
from tests.conftest import GitRepo
from tests.support.stack import AgentProcess, eventually

pytestmark = pytest.mark.real

CANARY = '''\
[backends.hello-v1]
import_path = "deployments.hello:Hello"
init_args = ["v1"]
ray_actor_options = { num_cpus = 0.1 }

[backends.hello-v2]
import_path = "deployments.hello:Hello"
init_args = ["v2"]
ray_actor_options = { num_cpus = 0.1 }

[endpoints.hello]
route = "/hello"
traffic = { hello-v1 = 0.9, hello-v2 = 0.1 }
'''


def replica_pids(backend: str) -> dict[str, int]:
    """The backend's live replica actors, by name, with their process ids (from the GCS's actor table)."""
    prefix = f"{REPLICA_PREFIX}{backend}-"
    return {
        actor["Name"]: int(actor["Pid"]) for actor in ray._private.state.actors().values()
        if actor["State"] == "ALIVE" and actor["Name"].startswith(prefix)
    }


def test_spec_edits_in_the_init_layout_keep_the_replicas_process(repo: GitRepo, tmp_path: Path, ray_session: str) -> None:
    write_scaffold(repo.root, SCAFFOLD)
    spec = (repo.root / "deployments/hello.toml").read_text()
    first = repo.commit("Add the hello deployment")
    agent = AgentProcess(repo.root, tmp_path, ray.get_runtime_context().gcs_address, cwd=tmp_path)
    timings: dict[str, float] = {}
    try:
        agent.wait_applied(first)
        eventually(lambda: agent.http.get(agent.proxy + "/hello").status_code == 200, timeout_s=60,
                   what="hello served")
        running = eventually(lambda: replica_pids("hello-v1"), what="hello-v1's replica")
        assert len(running) == 1

        def unchanged(name: str, expect_replicas: int) -> None:
            """hello-v1 kept its replicas: the survivors of a scale-down, the old ones plus the new of a scale-up."""
            nonlocal running
            # Applied means the goal is met; replicas scaled away may still be draining.
            now = eventually(lambda: len(found := replica_pids("hello-v1")) == expect_replicas and found,
                             what=f"{name}: {expect_replicas} replica(s) of hello-v1")
            kept = set(running) & set(now)
            assert len(kept) == min(len(running), len(now)), f"{name}: hello-v1's replicas were replaced: {running} -> {now}"
            assert {key: now[key] for key in kept} == {key: running[key] for key in kept}, f"{name}: a process changed"
            running = now

        def step(name: str, write: str, expect_replicas: int) -> None:
            (repo.root / "deployments/hello.toml").write_text(write)
            start = time.monotonic()
            commit = repo.commit(name)
            agent.wait_applied(commit)
            timings[name] = time.monotonic() - start
            unchanged(name, expect_replicas)

        step("three replicas", spec.replace("num_replicas = 1", "num_replicas = 3"), 3)
        step("back to one", spec, 1)
        other = '\n[endpoints.other]\nroute = "/other"\ntraffic = { hello-v1 = 1.0 }\n'
        step("another endpoint", spec + other, 1)
        step("canary", CANARY + other, 1)
        start = time.monotonic()
        repo.git("revert", "--no-edit", "HEAD")  # the canary's revert, as the tutorial's
        agent.wait_applied(repo.head())
        timings["revert"] = time.monotonic() - start
        unchanged("revert", 1)
        assert not replica_pids("hello-v2")
        print("commit -> applied, s:", {name: round(seconds, 2) for name, seconds in timings.items()})
    finally:
        agent.stop()
