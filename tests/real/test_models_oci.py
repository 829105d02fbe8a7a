"""oci:// models end to end: a real OCI registry on 127.0.0.1 (Debian's docker-registry,
tests.support.oci_registry) behind the registries' bearer-token flow with credentials,
a real agent and real Ray replicas (docs/guides/models.md). A backend whose model is a
KServe modelcar pinned by digest gets the image's /models, fetched once on the node for
its two replicas with the credentials from a `[secrets.NAME]`, and serves it through
the proxy; the credentials show nowhere. A commit pinning a manifest digest the
registry does not have fails whole, and the replicas of the good commit keep serving;
a tag is refused before anything is applied, naming `gitops models resolve`."""

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
from tests.support.oci_registry import LoopbackRegistry, TokenFront, oci_registry, token_front
from tests.support.stack import AgentProcess
from vocabulary.replicas.model_digests import manifest_digest

pytestmark = pytest.mark.real

CREDENTIALS = "ci-robot:oci-REAL-tier-pa55word"
TOKEN = "registry-bearer-token-real-tier"
REPOSITORY = "acme/tiny-modelcar"
APP = '''\
import hashlib
from pathlib import Path

from ray_gitops import serving


class Tiny:
    def __init__(self):
        self.root = Path(serving.model_path("tiny"))

    def __call__(self, request):
        files = sorted(p.relative_to(self.root).as_posix() for p in self.root.rglob("*") if p.is_file())
        weights = (self.root / "weights" / "model.safetensors").read_bytes()
        return {"files": files, "weights": hashlib.sha256(weights).hexdigest(),
                "replica": serving.context().replica_id}
'''
SPEC = """\
[secrets.registry]
file = "secrets/registry.age"

[models.tiny]
source = "{source}"
sha256 = "{digest}"
token_secret = "registry"
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
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LoopbackRegistry, TokenFront]]:
    with oci_registry(tmp_path_factory.mktemp("registry")) as server:
        with token_front(server.url, TOKEN, CREDENTIALS) as front:
            yield server, front


def test_an_oci_modelcar_by_digest_is_fetched_once_per_node_served_and_a_wrong_digest_fails_whole(
    ray_session: str, registry: tuple[LoopbackRegistry, TokenFront], repo: GitRepo, tmp_path: Path
) -> None:
    server, front = registry
    weights = os.urandom(3 * 1024 * 1024)
    files = {"config.json": b'{"labels": ["neg", "pos"]}', "weights/model.safetensors": weights}
    manifest = server.push_modelcar(REPOSITORY, "v1", files)
    digest = manifest_digest([(p, len(d), hashlib.sha256(d).hexdigest()) for p, d in files.items()])
    identity = pyrage.x25519.Identity.generate()
    identity_file = tmp_path / "age-identity.txt"
    identity_file.write_text(f"{identity}\n")
    identity_file.chmod(0o600)
    (repo.root / "secrets").mkdir()
    (repo.root / "secrets" / "registry.age").write_bytes(
        pyrage.encrypt(CREDENTIALS.encode(), [identity.to_public()])
    )
    repo.write("apps/__init__.py", "")
    repo.write("apps/tiny.py", APP)
    repo.write("deployments/tiny.toml", SPEC.format(source=f"oci://{front.host}/{REPOSITORY}@{manifest}",
                                                    digest=digest))
    first = repo.commit("a backend with a modelcar from an OCI registry")
    agent = AgentProcess(repo.root, tmp_path, ray.get_runtime_context().gcs_address, extra_args=[
        "--model-cache-dir", str(tmp_path / "cache"), "--age-identity", str(identity_file),
    ])
    try:
        agent.wait_applied(first)
        answers = [httpx.get(agent.proxy + "/tiny", timeout=10).json() for _ in range(10)]
        assert {a["weights"] for a in answers} == {hashlib.sha256(weights).hexdigest()}
        assert {tuple(a["files"]) for a in answers} == {("config.json", "weights/model.safetensors")}
        assert len({a["replica"] for a in answers}) == 2
        # Two replicas on one node: each layer pulled once, through the token flow.
        layers = server.client.get(f"{server.url}/v2/{REPOSITORY}/manifests/{manifest}",
                                   headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}).json()["layers"]
        assert [server.blob_gets(layer["digest"]) for layer in layers] == [1, 1]
        assert any(path == "/token" for path, _, _ in front.seen)

        # A manifest digest the registry does not have (a typo): the apply fails whole,
        # the good replicas keep serving.
        missing = "sha256:" + "f" * 64
        repo.write("deployments/tiny.toml", SPEC.format(source=f"oci://{front.host}/{REPOSITORY}@{missing}",
                                                        digest="1" * 64))
        bad = repo.commit("a digest that does not exist")
        agent.wait_attempted(bad)
        agent.wait("the failed commit in the status", lambda: "not found (404)" in json.dumps(agent.get("/status")),
                   timeout_s=120)
        status = agent.get("/status")
        assert status["last_applied_revision"] == first
        assert f"model tiny (oci://{front.host}/{REPOSITORY}@{missing}): not found (404)" in json.dumps(status)
        assert {httpx.get(agent.proxy + "/tiny", timeout=10).json()["weights"] for _ in range(6)} == {
            hashlib.sha256(weights).hexdigest()
        }

        # A tag: refused before anything is applied, naming the command that pins it.
        repo.write("deployments/tiny.toml", SPEC.format(source=f"oci://{front.host}/{REPOSITORY}:v1", digest=digest))
        tag = repo.commit("a tag instead of a digest")
        agent.wait_attempted(tag)
        agent.wait("the refused tag in the status", lambda: "is not a digest" in json.dumps(agent.get("/status")))
        assert agent.get("/status")["last_applied_revision"] == first
        assert f"gitops models resolve oci://{front.host}/{REPOSITORY}:v1" in json.dumps(agent.get("/status"))

        # The credentials are in no answer of the agent and in none of its logs.
        shown = json.dumps([agent.get("/status"), agent.get("/history")]) + agent.log_path.read_text()
        assert "pa55word" not in shown and TOKEN not in shown
    finally:
        agent.stop()
