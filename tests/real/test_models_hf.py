"""hf:// models end to end: a Hugging Face Hub on 127.0.0.1 (tests.support.hub, a
repository the test makes, behind a token), a real agent and real Ray replicas
(docs/guides/models.md). A backend whose model is a Hub repository at a pinned
commit gets the selected files, fetched once on the node for its two replicas,
with the token from a `[secrets.NAME]`, and serves them through the proxy; the
token shows nowhere. A commit pinning new weights at a revision the Hub does
not have fails whole, and the replicas of the good commit keep serving; a branch name is
refused before anything is applied."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pyrage
import pytest
import ray

from tests.conftest import GitRepo
from tests.support.hub import FakeHub, hub_server
from tests.support.stack import AgentProcess
from vocabulary.replicas.model_digests import manifest_digest

pytestmark = pytest.mark.real

TOKEN = "hf_realTierTOKEN0a1b2c3d4e5f"
REPO = "acme/tiny-sentiment"
APP = '''\
import hashlib
from pathlib import Path

from ray_gitops import serving


class Tiny:
    def __init__(self):
        self.root = Path(serving.model_path("tiny"))

    def __call__(self, request):
        files = sorted(p.name for p in self.root.iterdir())
        weights = (self.root / "model.safetensors").read_bytes()
        return {"files": files, "weights": hashlib.sha256(weights).hexdigest(),
                "replica": serving.context().replica_id}
'''
SPEC = """\
[secrets.hub]
file = "secrets/hub.age"

[models.tiny]
source = "hf://{repo}@{revision}"
sha256 = "{digest}"
include = ["*.json", "*.safetensors"]
token_secret = "hub"
load_timeout_s = 60

[backends.tiny]
import_path = "apps.tiny:Tiny"
models = ["tiny"]
num_replicas = 2
ray_actor_options = {{ num_cpus = 0 }}

[endpoints.tiny]
route = "/tiny"
traffic = {{ tiny = 1.0 }}
"""


@pytest.fixture(scope="module")
def hub() -> Iterator[FakeHub]:
    with hub_server(token=TOKEN) as server:
        yield server


def _write_spec(repo: GitRepo, revision: str, digest: str) -> None:
    repo.write("deployments/tiny.toml", SPEC.format(repo=REPO, revision=revision, digest=digest))


def test_an_hf_model_at_a_pinned_commit_is_fetched_once_per_node_served_and_a_wrong_revision_fails_whole(
    node_env_ray: str, hub: FakeHub, repo: GitRepo, tmp_path: Path
) -> None:
    weights = os.urandom(3 * 1024 * 1024)
    files = {"config.json": b'{"labels": ["neg", "pos"]}', "model.safetensors": weights,
             "pytorch_model.bin": os.urandom(4096), "README.md": b"# tiny"}
    commit = hub.commit(REPO, files)
    digest = manifest_digest([(p, len(files[p]), hashlib.sha256(files[p]).hexdigest())
                              for p in ("config.json", "model.safetensors")])
    identity = pyrage.x25519.Identity.generate()
    identity_file = tmp_path / "age-identity.txt"
    identity_file.write_text(f"{identity}\n")
    identity_file.chmod(0o600)
    (repo.root / "secrets").mkdir()
    (repo.root / "secrets" / "hub.age").write_bytes(pyrage.encrypt(TOKEN.encode(), [identity.to_public()]))
    repo.write("apps/__init__.py", "")
    repo.write("apps/tiny.py", APP)
    _write_spec(repo, commit, digest)
    first = repo.commit("a backend with a model from the Hub")
    agent = AgentProcess(repo.root, tmp_path, ray.get_runtime_context().gcs_address, extra_args=[
        "--model-cache-dir", str(tmp_path / "cache"), "--age-identity", str(identity_file),
    ])
    try:
        agent.wait_applied(first)
        answers = [httpx.get(agent.proxy + "/tiny", timeout=10).json() for _ in range(10)]
        assert {a["weights"] for a in answers} == {hashlib.sha256(weights).hexdigest()}
        assert {tuple(a["files"]) for a in answers} == {("config.json", "model.safetensors")}
        assert len({a["replica"] for a in answers}) == 2
        # Two replicas on one node: one download of the weights; unselected files never.
        assert hub.gets(f"/lfs/{hashlib.sha256(weights).hexdigest()}") == 1
        assert hub.gets("/pytorch_model.bin") == hub.gets("/README.md") == 0

        # New weights pinned at a commit the Hub does not have (a typo): the apply fails
        # whole, the good replicas keep serving. (A new source with the same digest would
        # change nothing that runs: the digest, not the revision, says what the bytes are.)
        missing = "f" * 40
        _write_spec(repo, missing, "1" * 64)
        bad = repo.commit("a revision that does not exist")
        agent.wait_attempted(bad)
        agent.wait("the failed commit in the status", lambda: "not found (404)" in json.dumps(agent.get("/status")),
                   timeout_s=120)
        status = agent.get("/status")
        assert status["last_applied_revision"] == first
        assert f"model tiny (hf://{REPO}@{missing}): not found (404)" in json.dumps(status)
        assert {httpx.get(agent.proxy + "/tiny", timeout=10).json()["weights"] for _ in range(6)} == {
            hashlib.sha256(weights).hexdigest()
        }

        # A branch: refused before anything is applied, naming the command that pins it.
        _write_spec(repo, "main", digest)
        branch = repo.commit("a branch instead of a commit")
        agent.wait_attempted(branch)
        agent.wait("the refused branch in the status",
                   lambda: "is not a full commit hash" in json.dumps(agent.get("/status")))
        assert agent.get("/status")["last_applied_revision"] == first
        assert f"gitops models resolve hf://{REPO}@main" in json.dumps(agent.get("/status"))

        # The token is in no answer of the agent and in none of its logs.
        shown = json.dumps([agent.get("/status"), agent.get("/history")]) + agent.log_path.read_text()
        assert TOKEN not in shown
    finally:
        agent.stop()
