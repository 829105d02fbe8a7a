"""Artifact automation watching an OCI repository end to end (docs/guides/automation.md):
a real agent on real Ray, a real git repository (bare, read and pushed to in place), and a
real OCI registry on 127.0.0.1 (Debian's docker-registry behind the registries'
bearer-token flow with credentials, tests.support.oci_registry).

The agent serves `[models.tiny]`, a KServe modelcar pinned at the manifest of tag
`v1.0.0`; `automation.toml` watches the repository with `pick = "semver"`, `match =
"^v1[.]"`, in commit mode, with the registry's credentials from
`--automation-registry-token-file` (the replicas get theirs from a `[secrets.NAME]`).
The training pipeline pushes `v1.1.0` (and a `v2.0.0` the match leaves out): within
one interval the agent pushes a commit to `main` whose diff is the pin's two lines —
the source's manifest digest and the model's sha256 — and nothing else, comments and
layout kept, its message naming the tag and both manifest digests; the agent then
applies it and the backend rolls to the new weights with no failed request under a
steady load. The credentials show in no status, log, metric or commit.

A pin whose canary fails is not proposed again: the automation pins a release whose
weights answer nothing, a person sends half the endpoint's traffic to the backend
serving it with a `[rollout]` judging the step, the canary fails its error-ratio check
and the rollout aborts (the history says which check); the person reverts, and the
automation's looks at the same release say it is quarantined, naming the aborted
commit, and push nothing; the next release is proposed as usual.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pyrage
import pytest
import ray

from tests.conftest import GitRepo
from tests.support.load import SteadyLoad
from tests.support.oci_registry import LoopbackRegistry, TokenFront, oci_registry, token_front
from tests.support.stack import AgentProcess
from vocabulary.replicas.model_digests import manifest_digest

pytestmark = pytest.mark.real

CREDENTIALS = "ci-robot:oci-AUTOMATION-real-pa55word"
TOKEN = "registry-bearer-token-automation-real"
REPOSITORY = "acme/tiny-automated"
INTERVAL_S = 5
APP = '''\
import hashlib
from pathlib import Path

from ray_gitops import serving


class Tiny:
    def __init__(self):
        self.weights = (Path(serving.model_path("tiny")) / "weights" / "model.safetensors").read_bytes()

    def __call__(self, request):
        return {"weights": hashlib.sha256(self.weights).hexdigest()}
'''
SPEC = """\
# The tiny model, a modelcar; automation.tiny moves its pin when the pipeline pushes a release.
[secrets.registry]
file = "secrets/registry.age"

[models.tiny]
source = "{source}"  # the manifest of a release tag
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
AUTOMATION = """\
[automation.tiny]
model = "tiny"
watch = "{watch}"
pick = "semver"
match = "^v1[.]"  # 1.x releases
interval_s = {interval}
mode = "commit"
"""


def _model(label: str) -> tuple[dict[str, bytes], str]:
    files = {"config.json": b"{}", "weights/model.safetensors": os.urandom(256 * 1024) + label.encode()}
    return files, manifest_digest([(p, len(d), hashlib.sha256(d).hexdigest()) for p, d in files.items()])


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LoopbackRegistry, TokenFront]]:
    with oci_registry(tmp_path_factory.mktemp("registry")) as server:
        with token_front(server.url, TOKEN, CREDENTIALS) as front:
            yield server, front


def _registry_secret(repo: GitRepo, tmp_path: Path) -> Path:
    """The registry's credentials as the spec's `[secrets.registry]` (secrets/registry.age in `repo`),
    sealed to a new age identity; returns the identity's file, for the agent's --age-identity."""
    identity = pyrage.x25519.Identity.generate()
    identity_file = tmp_path / "age-identity.txt"
    identity_file.write_text(f"{identity}\n")
    identity_file.chmod(0o600)
    (repo.root / "secrets").mkdir()
    (repo.root / "secrets" / "registry.age").write_bytes(pyrage.encrypt(CREDENTIALS.encode(), [identity.to_public()]))
    return identity_file


def _git(remote: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(remote), *args], check=True, capture_output=True, text=True).stdout


def test_a_new_release_tag_makes_the_automation_commit_the_pin_lines_and_the_backend_rolls(
    ray_session: str, registry: tuple[LoopbackRegistry, TokenFront], repo: GitRepo, tmp_path: Path
) -> None:
    server, front = registry
    files1, digest1 = _model("v1.0.0")
    files2, digest2 = _model("v1.1.0")
    manifest1 = server.push_modelcar(REPOSITORY, "v1.0.0", files1)
    name = f"oci://{front.host}/{REPOSITORY}"
    identity_file = _registry_secret(repo, tmp_path)
    repo.write("apps/__init__.py", "")
    repo.write("apps/tiny.py", APP)
    repo.write("deployments/tiny.toml", SPEC.format(source=f"{name}@{manifest1}", digest=digest1))
    repo.write("automation.toml", AUTOMATION.format(watch=name, interval=INTERVAL_S))
    first = repo.commit("tiny v1.0.0, and its automation")
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo.root), str(remote)], check=True)
    credentials = tmp_path / "registry-credentials"
    credentials.write_text(CREDENTIALS + "\n")
    credentials.chmod(0o600)
    agent = AgentProcess(remote, tmp_path, ray.get_runtime_context().gcs_address, extra_args=[
        "--model-cache-dir", str(tmp_path / "cache"), "--age-identity", str(identity_file),
        "--automation-registry-token-file", str(credentials),
    ])
    try:
        agent.wait_applied(first)
        agent.wait("the automation's first look", lambda: _look(agent) == "up_to_date")
        old = hashlib.sha256(files1["weights/model.safetensors"]).hexdigest()
        assert {_weights(agent) for _ in range(4)} == {old}
        with SteadyLoad(agent.proxy + "/tiny", clients=4, period_s=0.05) as load:
            # The pipeline pushes a 1.x release, and a 2.0.0 the match leaves out.
            server.push_modelcar(REPOSITORY, "v2.0.0", _model("v2.0.0")[0])
            manifest2 = server.push_modelcar(REPOSITORY, "v1.1.0", files2)
            pushed_at = time.monotonic()
            agent.wait("the automation's commit", lambda: _git(remote, "rev-parse", "main").strip() != first,
                       timeout_s=INTERVAL_S + 60)
            took = time.monotonic() - pushed_at
            assert took <= INTERVAL_S + 30, f"committed {took:.1f}s after the tag"
            head = _git(remote, "rev-parse", "main").strip()
            assert _git(remote, "rev-parse", "main^").strip() == first
            diff = _git(remote, "diff", "-U0", first, head)
            changed = [line for line in diff.splitlines() if line[:1] in "+-" and not line.startswith(("---", "+++"))]
            assert changed == [
                f'-source = "{name}@{manifest1}"  # the manifest of a release tag',
                f'-sha256 = "{digest1}"',
                f'+source = "{name}@{manifest2}"  # the manifest of a release tag',
                f'+sha256 = "{digest2}"',
            ]
            assert _git(remote, "diff", "--name-only", first, head).split() == ["deployments/tiny.toml"]
            message = _git(remote, "log", "-1", "--format=%B", head)
            assert f"named by: {name}:v1.1.0" in message
            assert f"source: {name}@{manifest1} -> {name}@{manifest2}" in message
            assert f"sha256: {digest1} -> {digest2}" in message
            # The agent applies its own commit: the backend rolls to the new weights.
            agent.wait_applied(head)
            new = hashlib.sha256(files2["weights/model.safetensors"]).hexdigest()
            agent.wait("the new weights", lambda: {_weights(agent) for _ in range(6)} == {new}, timeout_s=120)
            time.sleep(1)
            report = load.stop()
        assert report.requests > 0
        assert report.failed == 0, report.summary()
        agent.wait("the automation sees its pin", lambda: _look(agent) == "up_to_date", timeout_s=INTERVAL_S + 30)
        assert _git(remote, "rev-parse", "main").strip() == head  # proposed once
        metrics = agent.metrics()
        assert 'gitops_automation_proposals_total{automation="tiny",mode="commit"} 1.0' in metrics
        shown = [agent.log_path.read_text(), json.dumps(agent.get("/status")), metrics,
                 _git(remote, "log", "--format=%B", "main")]
        assert not [text[:200] for text in shown if "pa55word" in text or TOKEN in text]
    finally:
        agent.stop()


def _look(agent: AgentProcess) -> str | None:
    shown = agent.get("/status").get("automation", {}).get("automations", [])
    return shown[0]["result"] if shown else None


def _weights(agent: AgentProcess) -> str:
    return str(httpx.get(agent.proxy + "/tiny", timeout=10).json()["weights"])


CANARY_APP = '''\
import hashlib
from pathlib import Path

from ray_gitops import serving


class Tiny:
    def __init__(self, model):
        self.weights = (Path(serving.model_path(model)) / "weights" / "model.safetensors").read_bytes()

    def __call__(self, request):
        if self.weights.startswith(b"BROKEN"):
            raise RuntimeError("these weights answer nothing")
        return {"weights": hashlib.sha256(self.weights).hexdigest()}
'''
CANARY_SPEC = """\
# The stable model serves; the canary backend serves what automation.tiny pins.
[secrets.registry]
file = "secrets/registry.age"

[models.tiny-stable]
source = "{stable_source}"
sha256 = "{stable_digest}"
token_secret = "registry"
load_timeout_s = 60

[models.tiny]
source = "{source}"  # moved by automation.tiny
sha256 = "{digest}"
token_secret = "registry"
load_timeout_s = 60

[backends.tiny-stable]
import_path = "apps.tiny:Tiny"
init_args = ["tiny-stable"]
models = ["tiny-stable"]
ray_actor_options = {{ num_cpus = 0 }}
graceful_shutdown_timeout_s = 1

[backends.tiny-canary]
import_path = "apps.tiny:Tiny"
init_args = ["tiny"]
models = ["tiny"]
ray_actor_options = {{ num_cpus = 0 }}
graceful_shutdown_timeout_s = 1

[endpoints.tiny]
route = "/tiny"
traffic = {{ {traffic} }}

[endpoints.tiny.rollout]
steps = [0.5, 1.0]
step_interval_s = 10
min_requests = 10
max_error_ratio = 0.05
"""


def test_a_pin_whose_canary_fails_is_not_proposed_again_and_the_history_says_why(
    ray_session: str, registry: tuple[LoopbackRegistry, TokenFront], repo: GitRepo, tmp_path: Path
) -> None:
    server, front = registry
    repository = "acme/tiny-canaried"
    good, good_digest = _model("v1.0.0")
    broken = {"config.json": b"{}", "weights/model.safetensors": b"BROKEN" + os.urandom(64 * 1024)}
    broken_digest = manifest_digest([(p, len(d), hashlib.sha256(d).hexdigest()) for p, d in broken.items()])
    good_manifest = server.push_modelcar(repository, "v1.0.0", good)
    name = f"oci://{front.host}/{repository}"
    identity_file = _registry_secret(repo, tmp_path)
    repo.write("apps/__init__.py", "")
    repo.write("apps/tiny.py", CANARY_APP)

    def spec(source: str, digest: str, traffic: str) -> str:
        return CANARY_SPEC.format(stable_source=f"{name}@{good_manifest}", stable_digest=good_digest,
                                  source=source, digest=digest, traffic=traffic)

    stable_only = '"tiny-stable" = 1.0'
    repo.write("deployments/tiny.toml", spec(f"{name}@{good_manifest}", good_digest, stable_only))
    repo.write("automation.toml", AUTOMATION.format(watch=name, interval=INTERVAL_S))
    first = repo.commit("tiny v1.0.0 stable, a canary backend, and the automation")
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo.root), str(remote)], check=True)
    credentials = tmp_path / "registry-credentials"
    credentials.write_text(CREDENTIALS + "\n")
    credentials.chmod(0o600)
    agent = AgentProcess(remote, tmp_path, ray.get_runtime_context().gcs_address, extra_args=[
        "--model-cache-dir", str(tmp_path / "cache"), "--age-identity", str(identity_file),
        "--automation-registry-token-file", str(credentials),
    ])
    work = tmp_path / "person"  # a person's clone of the remote, pushing as people do
    try:
        agent.wait_applied(first)
        agent.wait("the automation's first look", lambda: _look(agent) == "up_to_date")
        # The pipeline pushes v1.1.0, whose weights answer nothing: the automation pins it.
        broken_manifest = server.push_modelcar(repository, "v1.1.0", broken)
        agent.wait("the automation's commit", lambda: _git(remote, "rev-parse", "main").strip() != first,
                   timeout_s=INTERVAL_S + 60)
        pinned = _git(remote, "rev-parse", "main").strip()
        agent.wait_applied(pinned)
        # A person sends half the traffic to the canary backend, with the rollout judging it.
        subprocess.run(["git", "clone", "-q", str(remote), str(work)], check=True)
        canary_split = '"tiny-stable" = 0.5, "tiny-canary" = 0.5'
        (work / "deployments" / "tiny.toml").write_text(
            spec(f"{name}@{broken_manifest}", broken_digest, canary_split))
        canary = _commit_and_push(work, "canary: half the traffic to v1.1.0")
        with SteadyLoad(agent.proxy + "/tiny", clients=4, period_s=0.05) as load:
            agent.wait("the canary commit aborted", lambda: _result(agent, canary) == "aborted", timeout_s=180)
            load.stop()
        (row,) = [entry for entry in agent.get("/history?limit=50")["entries"]
                  if entry["commit"] == canary and entry["result"] == "aborted"]
        assert "tiny-canary: error_ratio" in row["errors"][0] and "> 0.05" in row["errors"][0]
        # The person reverts the pin and the split: the automation sees v1.1.0 again, and does not
        # propose it (its digest is quarantined), saying why.
        (work / "deployments" / "tiny.toml").write_text(spec(f"{name}@{good_manifest}", good_digest, stable_only))
        reverted = _commit_and_push(work, "back to v1.0.0")
        agent.wait("the quarantined look", lambda: _look(agent) == "quarantined", timeout_s=INTERVAL_S + 60)
        (shown,) = agent.get("/status")["automation"]["automations"]
        assert shown["new_sha256"] == broken_digest and shown["new_source"] == f"{name}@{broken_manifest}"
        assert (f"sha256 {broken_digest[:12]} is not proposed again: its rollout aborted (a failed canary check) "
                f"at commit {canary[:12]}") in shown["detail"]
        time.sleep(INTERVAL_S * 2)  # two more looks: still nothing proposed
        assert _git(remote, "rev-parse", "main").strip() == reverted
        assert _look(agent) == "quarantined"
        assert 'gitops_automation_runs_total{automation="tiny",result="quarantined"}' in agent.metrics()
        # A newer good release is proposed as usual.
        newer, newer_digest = _model("v1.2.0")
        newer_manifest = server.push_modelcar(repository, "v1.2.0", newer)
        agent.wait("the newer release proposed",
                   lambda: _git(remote, "rev-parse", "main").strip() != reverted, timeout_s=INTERVAL_S + 60)
        text = _git(remote, "show", "main:deployments/tiny.toml")
        assert f'source = "{name}@{newer_manifest}"  # moved by automation.tiny' in text
        assert f'sha256 = "{newer_digest}"' in text
    finally:
        agent.stop()


def _commit_and_push(work: Path, message: str) -> str:
    for args in (["add", "-A"], ["-c", "user.name=person", "-c", "user.email=person@example.com", "commit", "-q",
                                 "-m", message], ["push", "-q", "origin", "HEAD:main"]):
        subprocess.run(["git", "-C", str(work), *args], check=True)
    return subprocess.run(["git", "-C", str(work), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()


def _result(agent: AgentProcess, commit: str) -> str | None:
    rows = [entry["result"] for entry in agent.get("/history?limit=50")["entries"] if entry["commit"] == commit]
    return "aborted" if "aborted" in rows else (rows[0] if rows else None)
