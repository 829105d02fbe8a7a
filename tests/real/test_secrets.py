"""Secrets in git, end to end with a real agent and a real Ray: a planted
value reaches the replica and nowhere else, and a rotation by commit changes
what the replica sees without a failed request (docs/guides/secrets.md)."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Iterator

import httpx
import pyrage
import pytest
import ray

from controller.persistence.ray_kv import RayKVStorage
from controller.state.backend_state import REPLICA_PREFIX
from tests.conftest import GitRepo
from tests.support.receivers import Receiver
from tests.support.stack import AgentProcess, agent_namespace, named_actors
from vocabulary.control.goal_api import CONTROLLER_NAME

pytestmark = pytest.mark.real

APP = '''\
import hashlib
from pathlib import Path

from ray_gitops import serving


class Vault:
    def __init__(self):
        self.seen = serving.secret("db")

    def reconfigure_secrets(self):
        self.seen = serving.secret("db")

    def __call__(self, request):
        # In a rotation the file, secret() and the hook's copy change one after the other (a request
        # running meanwhile may see both values): the test compares the three once it is over.
        from_file = Path(serving.secret_path("db")).read_bytes()
        mode = Path(serving.secret_path("db")).stat().st_mode & 0o777
        seen = {hashlib.sha256(value).hexdigest() for value in (from_file, serving.secret("db"), self.seen)}
        return {"sha256": hashlib.sha256(self.seen).hexdigest(), "mode": oct(mode), "replica": serving.context().replica_id,
                "one_value": len(seen) == 1}
'''
SPEC = """\
[secrets.db]
file = "secrets/db.age"

[backends.vault]
import_path = "apps.vault:Vault"
secrets = ["db"]
ray_actor_options = { num_cpus = 0 }

[endpoints.vault]
route = "/vault"
traffic = { vault = 1.0 }
"""


def _identity(tmp_path: Path) -> tuple[Path, object]:
    """A throwaway age identity made by the test (never a committed key)."""
    identity = pyrage.x25519.Identity.generate()
    path = tmp_path / "age-identity.txt"
    path.write_text(f"# test key\n{identity}\n")
    path.chmod(0o600)
    return path, identity.to_public()


def _plant(repo: GitRepo, value: bytes, recipient: object, message: str) -> str:
    (repo.root / "secrets").mkdir(exist_ok=True)
    (repo.root / "secrets" / "db.age").write_bytes(pyrage.encrypt(value, [recipient]))
    return repo.commit(message)


def _files_holding(root: Path, needles: list[bytes]) -> list[str]:
    found = []
    for path in root.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                if any(needle in data for needle in needles):
                    found.append(str(path))
        except OSError:
            continue
    return found


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """Every notification the agent sends."""
    with Receiver() as receiver:
        yield receiver


def _sha(value: bytes) -> str:
    return hashlib.sha256(value).hexdigest()


def test_a_secret_reaches_its_replica_only_and_rotates_by_commit_without_a_failed_request(
    ray_session: str, repo: GitRepo, tmp_path: Path, receiver: Receiver
) -> None:
    identity_file, recipient = _identity(tmp_path)
    value = f"pw-{uuid.uuid4().hex}".encode()
    rotated = f"pw-{uuid.uuid4().hex}".encode()
    restarted = f"pw-{uuid.uuid4().hex}".encode()
    needles = [secret for plain in (value, rotated, restarted) for secret in (plain, base64.b64encode(plain))]
    repo.write("apps/__init__.py", "")
    repo.write("apps/vault.py", APP)
    repo.write("deployments/vault.toml", SPEC)
    first = _plant(repo, value, recipient, "a backend with a secret")
    notify = tmp_path / "notify.toml"
    notify.write_text(f'[providers.hook]\ntype = "webhook"\nurl = "{receiver.url}/hook"\n')
    agent = AgentProcess(
        repo.root, tmp_path, ray.get_runtime_context().gcs_address,
        extra_args=["--age-identity", str(identity_file), "--notify", str(notify)],
    )
    failures: list[str] = []
    served: list[str] = []
    stop = threading.Event()
    try:
        agent.wait_applied(first)
        answer = httpx.get(agent.proxy + "/vault", timeout=10).json()
        assert (answer["sha256"], answer["mode"], answer["one_value"]) == (_sha(value), "0o600", True)

        def light_load() -> None:
            with httpx.Client(timeout=10) as client:
                while not stop.is_set():
                    response = client.get(agent.proxy + "/vault")
                    if response.status_code != 200:
                        failures.append(f"{response.status_code} {response.text[:200]}")
                    else:
                        served.append(response.json()["sha256"])
                    stop.wait(0.05)

        load = threading.Thread(target=light_load)
        load.start()
        # A rotation in place: the class has reconfigure_secrets(), the replica stays.
        second = _plant(repo, rotated, recipient, "rotate the password")
        agent.wait_applied(second)
        agent.wait("the rotated value", lambda: httpx.get(agent.proxy + "/vault").json()["sha256"] == _sha(rotated))
        after = httpx.get(agent.proxy + "/vault").json()
        assert (after["replica"], after["one_value"]) == (answer["replica"], True)
        # A value nobody's identity opens: the commit fails, naming the secret and its file; nothing changes.
        stranger = pyrage.x25519.Identity.generate().to_public()
        bad = _plant(repo, b"never-delivered", stranger, "a value the agent cannot open")
        agent.wait_attempted(bad)
        status = agent.get("/status")
        assert status["last_applied_revision"] == second
        assert "secret 'db' (secrets/db.age) does not decrypt" in json.dumps(status)
        assert httpx.get(agent.proxy + "/vault").json()["sha256"] == _sha(rotated)
        # on_secret_change = "restart": a rolling restart brings the new value.
        repo.write("deployments/vault.toml", SPEC.replace('secrets = ["db"]', 'secrets = ["db"]\non_secret_change = "restart"'))
        third = _plant(repo, restarted, recipient, "rotate again, restarting")
        agent.wait_applied(third)
        agent.wait("the restarted value", lambda: httpx.get(agent.proxy + "/vault").json()["sha256"] == _sha(restarted))
        after = httpx.get(agent.proxy + "/vault").json()
        assert after["replica"] != answer["replica"] and after["one_value"]
        stop.set()
        load.join(30)
        # A restarted controller holds no values; the agent sends them again, and a
        # replica replacing a lost one gets them (it waits for them if need be).
        restarted_replica = httpx.get(agent.proxy + "/vault").json()["replica"]
        ray.kill(ray.get_actor(CONTROLLER_NAME, namespace=agent_namespace()), no_restart=False)
        for name in named_actors(agent_namespace(), REPLICA_PREFIX):
            ray.kill(ray.get_actor(name, namespace=agent_namespace()), no_restart=True)

        def replaced() -> bool:
            answer = httpx.get(agent.proxy + "/vault", timeout=10).json()
            return answer["replica"] != restarted_replica and answer["sha256"] == _sha(restarted)

        agent.wait("a replacement replica with the value", replaced, timeout_s=120)
        # Every surface a user, Ray or the agent writes, read while it runs.
        surfaces = {
            "/status": agent.http.get(agent.admin + "/status").text,
            "/history": agent.http.get(agent.admin + "/history").text,
            "/metrics": agent.metrics(),
            "status page": agent.http.get(agent.admin + "/").text,
            "gitops status --json": subprocess.run(
                [sys.executable, "-m", "gitops", "status", "--agent", agent.admin, "--json"],
                capture_output=True, text=True, timeout=60,
            ).stdout,
            "controller checkpoint (Ray KV)": (RayKVStorage(agent_namespace()).get() or b"").decode(errors="replace"),
            # What `ray list actors --detail` reads (the GCS actor table, runtime envs and all):
            # the test session's Ray runs no dashboard for the state API's HTTP server.
            "GCS actor table": repr(ray._private.state.actors()),
            "GCS job table": repr(ray._private.state.jobs()),
        }
        plan = subprocess.run(
            [sys.executable, "-m", "gitops", "plan", "--repo", str(repo.root), "--from", first, "--to", second],
            capture_output=True, text=True, timeout=60,
        )
        surfaces["gitops plan"] = plan.stdout + plan.stderr
        notified = [request.body.decode() for request in receiver.wait_for(3, timeout_s=30)]
        surfaces["notifications"] = "\n".join(notified)
        assert any("does not decrypt" in body for body in notified)  # the failed commit was told
    finally:
        stop.set()
        agent.stop()
    assert failures == []
    # The load ran across both rotations and saw the values it brought (during a rolling
    # restart the old replica may still answer a request or two, with its own value).
    assert {_sha(rotated), _sha(restarted)} <= set(served) <= {_sha(value), _sha(rotated), _sha(restarted)}
    assert served[-1] == _sha(restarted)
    assert "~ backend vault (in place)\n    ~ secret db (changed)" in surfaces["gitops plan"]
    for name, text in surfaces.items():
        assert text, name
        for needle in needles:
            assert needle.decode() not in text, f"a secret value is shown by {name}"
    session_dir = Path(ray._private.worker._global_node.get_session_dir_path())
    assert _files_holding(session_dir, needles) == [], "Ray's session directory holds a secret value"
    assert _files_holding(tmp_path / "state", needles) == [], "the state dir holds a secret value"
    assert _files_holding(agent.log_path.parent, needles) == []  # the agent log and the state dir beside it
    assert _files_holding(repo.root, [value, rotated, restarted]) == [], "the repository holds a value in plain text"
    key = tmp_path / "state" / "secrets-hmac.key"
    assert key.stat().st_mode & 0o777 == 0o600
    # Stopped replicas removed their secret files (the controller drains them at shutdown).
    for entry in Path("/dev/shm").glob("gitops-secrets-*"):
        assert _files_holding(entry, needles) == [], f"{entry} outlived its replica"
