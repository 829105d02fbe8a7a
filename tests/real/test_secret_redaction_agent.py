"""A secret's value in a handler's exception, with a real agent (issue 50, row 3).

A backend doing `int(serving.secret("db").text())` raises a ValueError
whose message holds the value. It was shown by `gitops status` (latest
exception), `/status`, the status page, `gitops logs`, the agent's log and
the proxy worker's log. Now the value (or its repr, base64, percent-encoded
form) appears in none of them, nor anywhere in Ray's session directory,
while the exception is still shown, masked as `***`. And no process that
holds the value writes a core dump: the agent (its supervisor and the child
that runs the loop), the controller actor, the replica and the proxy worker
each read "Max core file size 0" in their /proc/PID/limits.
"""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path
from urllib.parse import quote

import httpx
import pyrage
import pytest
import ray

from controller.state.backend_state import REPLICA_PREFIX
from controller.state.proxy_fleet import PROXY_PREFIX
from tests.conftest import GitRepo
from tests.support.faults import actor_pid
from tests.support.stack import AgentProcess, gitops_cli as gitops, named_actors
from vocabulary.control.goal_api import CONTROLLER_NAME

pytestmark = pytest.mark.real

APP = '''\
from ray_gitops import serving


class Parse:
    def __call__(self, request):
        return {"n": int(serving.secret("db").text())}
'''
SPEC = """\
[secrets.db]
file = "secrets/db.age"

[backends.parse]
import_path = "deployments.parse:Parse"
secrets = ["db"]
ray_actor_options = { num_cpus = 0 }

[endpoints.parse]
route = "/parse"
traffic = { parse = 1.0 }
"""


def _files_holding(root: Path, needles: list[bytes]) -> list[str]:
    found = []
    for path in root.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink() and any(n in path.read_bytes() for n in needles):
                found.append(str(path))
        except OSError:
            continue
    return found


def _core_limit(pid: int) -> str:
    """The soft and hard "Max core file size" of `pid`, as /proc/PID/limits says them."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max core file size"):
            return " ".join(line.split()[4:6])
    raise AssertionError(f"/proc/{pid}/limits has no core size line")


def _descendants(pid: int) -> list[int]:
    """Every live process whose ancestry leads to `pid`."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parents[int(entry)] = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def _holders(namespace: str, agent: AgentProcess) -> dict[str, int]:
    """The pid of each process holding the value (or the agent's tokens)."""
    handles = {
        "controller": ray.get_actor(CONTROLLER_NAME, namespace=namespace),
        "replica": ray.get_actor(sorted(named_actors(namespace, REPLICA_PREFIX))[0], namespace=namespace),
        "proxy worker": ray.get_actor(sorted(named_actors(namespace, PROXY_PREFIX))[0], namespace=namespace),
    }
    pids = {name: actor_pid(handle) for name, handle in handles.items()}
    pids["agent"] = agent.process.pid
    for child in _descendants(agent.process.pid):
        if b"gitops" in Path(f"/proc/{child}/cmdline").read_bytes():
            pids[f"agent's child {child}"] = child
    return pids


def test_row3_a_value_in_a_handlers_exception_is_shown_nowhere(ray_session: str, repo: GitRepo, tmp_path: Path) -> None:
    identity = pyrage.x25519.Identity.generate()
    identity_file = tmp_path / "age-identity.txt"
    identity_file.write_text(f"# test key\n{identity}\n")
    identity_file.chmod(0o600)
    value = f"PLAINTEXT-{uuid.uuid4().hex}"
    needles = [value, base64.b64encode(value.encode()).decode(), quote(f"'{value}'", safe="")]
    repo.write("deployments/__init__.py", "")
    repo.write("deployments/parse.py", APP)
    repo.write("deployments/parse.toml", SPEC)
    (repo.root / "secrets").mkdir()
    (repo.root / "secrets" / "db.age").write_bytes(pyrage.encrypt(value.encode(), [identity.to_public()]))
    commit = repo.commit("a backend that puts its secret in an exception")
    namespace = f"secret-redaction-{uuid.uuid4().hex[:8]}"
    agent = AgentProcess(repo.root, tmp_path, ray.get_runtime_context().gcs_address, extra_args=[
        "--age-identity", str(identity_file), "--state-dir", str(repo.root / ".gitops-state"),
        "--namespace", namespace,
    ])
    inside = repo.root / "deployments"
    try:
        agent.wait_applied_though_erring(commit)
        agent.wait("the replica answering", lambda: httpx.get(agent.proxy + "/parse", timeout=10).status_code == 500)
        for _ in range(5):
            assert httpx.get(agent.proxy + "/parse", timeout=10).status_code == 500

        def latest() -> str:
            return str(agent.get("/status")["backends"]["parse"].get("latest_exception") or "")

        agent.wait("the latest exception in status", lambda: "ValueError" in latest(), timeout_s=60)
        assert "invalid literal for int() with base 10: '***'" in latest(), latest()
        agent.wait("the agent's log line", lambda: "backend parse answers 5xx" in agent.log_path.read_text())
        logs = gitops("logs", "parse", cwd=inside)
        assert logs.returncode == 0, logs.stderr
        assert "ValueError: invalid literal for int() with base 10: '***'" in logs.stdout, logs.stdout[-2000:]
        surfaces = {
            "/status": agent.http.get(agent.admin + "/status").text,
            "status page": agent.http.get(agent.admin + "/").text,
            "/history": agent.http.get(agent.admin + "/history").text,
            "gitops status": gitops("status", cwd=inside).stdout,
            "gitops logs": logs.stdout + logs.stderr,
            "agent log": agent.log_path.read_text(),
        }
        holders = _holders(namespace, agent)
        assert any(name.startswith("agent's child") for name in holders), holders  # the loop runs in a child
        limits = {name: _core_limit(pid) for name, pid in holders.items()}
    finally:
        agent.stop()
    assert limits and all(limit == "0 0" for limit in limits.values()), limits
    for name, text in surfaces.items():
        assert text, name
        for needle in needles:
            assert needle not in text, f"{name} shows the value ({needle[:12]}...)"
    session_dir = Path(ray._private.worker._global_node.get_session_dir_path())
    held = [needle.encode() for needle in needles]
    # The proxy worker's log, the replica's .err/.out and every other file Ray writes.
    assert _files_holding(session_dir, held) == [], "Ray's session directory holds the value"
    assert _files_holding(tmp_path, held) == []
