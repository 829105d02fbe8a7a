"""A replica that hangs while its health check passes is found by the proxy and replaced (issue 34, item 2).

A real `gitops run` joined to the session's Ray serves a backend of two
replicas; the first replica to start claims a marker file and from then on
hangs every request (an `await` that never ends), while its health check
keeps passing, as in ray-project/ray#61263. Under steady load through the
real proxy the hung replica's calls run out the endpoint's timeout; two of
them with nothing answered make it stalled: the proxy takes it out of
routing and reports it, the controller replaces it, and status and metrics
say so. Idempotent requests it held are retried on the other replica.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest
import ray

from tests.conftest import GitRepo
from tests.support.stack import AgentProcess

pytestmark = pytest.mark.real

APP = '''\
import asyncio
import os

from ray_gitops.serving import context

MARK = {mark!r}


class Hang:
    def __init__(self) -> None:
        me = context().replica_id
        try:
            fd = os.open(MARK, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            self.hung = False
        else:
            os.write(fd, me.encode())
            os.close(fd)
            self.hung = True

    async def __call__(self, request) -> dict:
        if self.hung:
            await asyncio.Event().wait()  # never answers; the health check still passes
        return {{"replica": context().replica_id}}
'''

SPEC = '''\
[backends.hang]
import_path = "deployments.hang:Hang"
num_replicas = 2
ray_actor_options = { num_cpus = 0.1 }
health_check_period_s = 1

[endpoints.hang]
route = "/hang"
methods = ["GET", "POST"]
timeout_s = 2
traffic = { hang = 1.0 }
'''


@pytest.fixture
def agent(ray_session: str, repo: GitRepo, tmp_path: Path):
    mark = tmp_path / "hung-replica"
    repo.write("deployments/__init__.py", "")
    repo.write("deployments/hang.py", APP.format(mark=str(mark)))
    repo.write("deployments/hang.toml", SPEC)
    repo.commit("a backend one of whose replicas hangs")
    running = AgentProcess(repo.root, tmp_path, ray.get_runtime_context().gcs_address)
    try:
        yield running
    finally:
        running.stop()


def _backend(agent: AgentProcess) -> dict:
    return agent.get("/status")["backends"]["hang"]


def _replica_actors(replica_id: str) -> list[str]:
    """The live named actors of that replica (any namespace)."""
    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].endswith(replica_id)]


def test_a_hung_replica_whose_health_check_passes_is_taken_out_and_replaced(
    agent: AgentProcess, repo: GitRepo, tmp_path: Path
) -> None:
    mark = tmp_path / "hung-replica"
    agent.wait_applied(repo.head())
    agent.wait("two replicas ready", lambda: _backend(agent)["ready"] == 2, timeout_s=120)
    hung_id = mark.read_text()
    assert _replica_actors(hung_id), "the hung replica's actor runs"

    codes: dict[str, list[int]] = {"GET": [], "POST": []}
    stop = threading.Event()

    def load(method: str) -> None:
        with httpx.Client(timeout=15) as client:
            while not stop.is_set():
                answer = client.request(method, agent.proxy + "/hang", content=b"" if method == "GET" else b"{}")
                codes[method].append(answer.status_code)
                if answer.status_code == 200:
                    assert answer.json()["replica"] != hung_id

    threads = [threading.Thread(target=load, args=(method,), daemon=True) for method in ["GET", "POST"] * 4]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    try:
        def replaced() -> bool:
            backend = _backend(agent)
            return backend["restarts"].get("stalled", 0) >= 1 and backend["ready"] == 2 and not _replica_actors(hung_id)

        seconds = agent.wait("the hung replica replaced", replaced, timeout_s=90)
        print(f"hung replica {hung_id} replaced {seconds:.1f}s after the load began")
        time.sleep(2)  # steady load on the two healthy replicas
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=20)
    backend = _backend(agent)
    assert backend["restarts"] == {"stalled": 1}, backend
    assert "ran out their timeout" in backend["last_error"], backend
    answered = codes["GET"] + codes["POST"]
    print({method: {code: got.count(code) for code in set(got)} for method, got in codes.items()})
    # GETs the hung replica held are retried elsewhere once it is found (or once it is
    # killed); only those that ran out their own timeout are 504.
    assert set(codes["GET"]) <= {200, 504}, codes
    # A POST it held is 504; one held by a proxy worker that had not yet found it
    # stalled is 502 when the controller kills it, as for any replica that died.
    assert set(codes["POST"]) <= {200, 502, 504}, codes
    # Only calls it held before it was found fail: a few per proxy worker, not one per request.
    assert 2 <= answered.count(504) + answered.count(502) <= 16, codes
    assert answered.count(200) >= 20, codes
    assert time.monotonic() - started < 120

    # After the replacement every request is answered by a healthy replica.
    with httpx.Client(timeout=10) as client:
        for _ in range(20):
            answer = client.get(agent.proxy + "/hang")
            assert answer.status_code == 200 and answer.json()["replica"] != hung_id

    proxy_metrics = httpx.get(f"http://127.0.0.1:{agent.metrics_port}/metrics", timeout=10).text
    assert 'gitops_replica_stalls_total{backend="hang"}' in proxy_metrics, proxy_metrics[-2000:]
    agent.wait("the restart reason in the agent's metrics",
               lambda: 'gitops_replica_restarts_total{backend="hang",reason="stalled"} 1.0' in agent.metrics())
