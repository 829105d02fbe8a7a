"""A secret's value in a handler's exception, with a real agent (issue 50, row 3).

A backend doing `int(serving.secret("db").text())` raises a ValueError
whose message holds the value. It was shown by `gitops status` (latest
exception), `/status`, the status page, `gitops logs`, the agent's log and
the proxy worker's log. Now the value (or its repr, base64, percent-encoded
form) appears in none of them, nor anywhere in Ray's session directory,
while the exception is still shown, masked as `***`.
"""

from __future__ import annotations

import base64
import uuid
from pathlib import Path
from urllib.parse import quote

import httpx
import pyrage
import pytest
import ray

from tests.conftest import GitRepo
from tests.support.stack import AgentProcess, gitops_cli as gitops

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
    agent = AgentProcess(repo.root, tmp_path, ray.get_runtime_context().gcs_address, extra_args=[
        "--age-identity", str(identity_file), "--state-dir", str(repo.root / ".gitops-state"),
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
    finally:
        agent.stop()
    for name, text in surfaces.items():
        assert text, name
        for needle in needles:
            assert needle not in text, f"{name} shows the value ({needle[:12]}...)"
    session_dir = Path(ray._private.worker._global_node.get_session_dir_path())
    held = [needle.encode() for needle in needles]
    # The proxy worker's log, the replica's .err/.out and every other file Ray writes.
    assert _files_holding(session_dir, held) == [], "Ray's session directory holds the value"
    assert _files_holding(tmp_path, held) == []
