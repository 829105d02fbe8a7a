"""Artifact automation end to end (docs/guides/automation.md): a real agent on real Ray,
a real git repository (bare, read and pushed to in place), moto's S3 server on
127.0.0.1 and a loopback server posing as GitHub's pull-request API
(`tests.support.forges`).

The agent serves `[models.sentiment]` from `s3://models/sentiment/v1/`;
`automation.toml` watches the prefix (`pick = "highest-version"`). The training
pipeline publishes `v2/`: within one interval (plus the look itself) a pull
request from `gitops/automation-sentiment` to `main` is opened, whose diff is the
pin's two lines (the source names the new directory, the sha256 its digest) and
nothing else, comments and layout kept. Merging it (a fast-forward of `main`)
rolls the backend to the new weights with no failed request under a steady load.
The token goes to the API and nowhere a person or a scraper reads. A prefix
emptied is an error look, counted (the shipped automation alert's series).

Signed automation (issue 44 item 4): an agent that verifies commits
(`--verify-commits --allowed-signers`, the first commit signed by a person's
key) and signs its own (`--signing-key`), its automation in `commit` mode,
pushes a signed pin commit for `v2/` that the same agent then applies: Synced at
that commit, serving the new weights, the key's path nowhere in status or log.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import ray

from tests.conftest import GitRepo
from tests.support.forges import Forge
from tests.support.load import SteadyLoad
from tests.support.s3 import s3_server
from tests.support.signing_keys import allowed_signers, make_key, signed_commit
from tests.support.stack import AgentProcess
from vocabulary.replicas.model_digests import manifest_digest

pytestmark = pytest.mark.real

TOKEN = "automation-real-token-0c9d4e7a1b2f3865"
INTERVAL_S = 5
APP = '''\
import hashlib
from pathlib import Path

from ray_gitops import serving


class Sentiment:
    def __init__(self):
        self.weights = (Path(serving.model_path("sentiment")) / "weights.bin").read_bytes()

    def __call__(self, request):
        return {"weights": hashlib.sha256(self.weights).hexdigest()}
'''
SPEC = """\
# The sentiment model; automation.sentiment moves its pin when the pipeline publishes.
[models.sentiment]
source = "s3://models/sentiment/{version}/"  # what the pipeline published
sha256 = "{digest}"
load_timeout_s = 60

[backends.sentiment]
import_path = "apps.sentiment:Sentiment"
models = ["sentiment"]
num_replicas = 2
ray_actor_options = {{ num_cpus = 0 }}

[endpoints.sentiment]
route = "/sentiment"
traffic = {{ sentiment = 1.0 }}
"""
AUTOMATION = """\
[automation.sentiment]
model = "sentiment"
watch = "s3://models/sentiment/"
pick = "highest-version"
match = "^v[0-9]+/$"
interval_s = {interval}
mode = "{mode}"
provider = "github"
repository = "acme/serving"
api_url = "{api_url}"
"""


def _model(label: str) -> tuple[dict[str, bytes], str]:
    files = {"weights.bin": os.urandom(256 * 1024) + label.encode(), "config.json": b"{}"}
    return files, manifest_digest([(p, len(d), hashlib.sha256(d).hexdigest()) for p, d in files.items()])


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    with s3_server("models") as client:
        yield client


@pytest.fixture
def forge() -> Iterator[Forge]:
    github = Forge("github")
    yield github
    github.close()


def _git(remote: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(remote), *args], check=True, capture_output=True, text=True).stdout


def test_an_automation_opens_a_pull_request_whose_merge_rolls_the_model(
    node_env_ray: str, s3: Any, repo: GitRepo, tmp_path: Path, forge: Forge
) -> None:
    files1, digest1 = _model("v1")
    files2, digest2 = _model("v2")
    for path, data in files1.items():
        s3.put_object(Bucket="models", Key=f"sentiment/v1/{path}", Body=data)
    repo.write("apps/__init__.py", "")
    repo.write("apps/sentiment.py", APP)
    repo.write("deployments/sentiment.toml", SPEC.format(version="v1", digest=digest1))
    repo.write("automation.toml", AUTOMATION.format(interval=INTERVAL_S, api_url=forge.url, mode="pull_request"))
    first = repo.commit("sentiment v1, and its automation")
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo.root), str(remote)], check=True)
    token = tmp_path / "automation-token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    agent = AgentProcess(remote, tmp_path, ray.get_runtime_context().gcs_address, extra_args=[
        "--automation-token-file", str(token), "--promote-api-url", forge.url,
    ])
    try:
        agent.wait_applied(first)
        agent.wait("the automation's first look", lambda: _look(agent) == "up_to_date")
        assert forge.calls == []
        with SteadyLoad(agent.proxy + "/sentiment", clients=4, period_s=0.05) as load:
            # The pipeline publishes v2: a pull request within one interval.
            for path, data in files2.items():
                s3.put_object(Bucket="models", Key=f"sentiment/v2/{path}", Body=data)
            opened = agent.wait("the pull request", lambda: bool(forge.opened), timeout_s=INTERVAL_S + 30)
            assert opened <= INTERVAL_S + 5, f"opened {opened:.1f}s after the object"
            (pull,) = forge.opened
            assert (pull["head"]["ref"], pull["base"]["ref"]) == ("gitops/automation-sentiment", "main")
            assert digest1 in pull["body"] and digest2 in pull["body"]
            head = _git(remote, "rev-parse", "gitops/automation-sentiment").strip()
            diff = _git(remote, "diff", "-U0", "main", head)
            changed = [line for line in diff.splitlines() if line[:1] in "+-" and not line.startswith(("---", "+++"))]
            assert changed == [
                '-source = "s3://models/sentiment/v1/"  # what the pipeline published',
                f'-sha256 = "{digest1}"',
                '+source = "s3://models/sentiment/v2/"  # what the pipeline published',
                f'+sha256 = "{digest2}"',
            ]
            assert _git(remote, "diff", "--name-only", "main", head).split() == ["deployments/sentiment.toml"]
            # A person merges it (a fast-forward of main): the agent rolls the backend.
            _git(remote, "update-ref", "refs/heads/main", head, first)
            agent.wait_applied(head)
            new = hashlib.sha256(files2["weights.bin"]).hexdigest()
            agent.wait("the new weights", lambda: {_weights(agent) for _ in range(6)} == {new}, timeout_s=120)
            time.sleep(1)
            report = load.stop()
        assert report.requests > 0
        assert report.failed == 0, report.summary()
        agent.wait("the automation sees the merged pin", lambda: _look(agent) == "up_to_date")
        assert len(forge.opened) == 1
        shown = [agent.log_path.read_text(), json.dumps(agent.get("/status")), agent.metrics(),
                 *(json.dumps(call.body) for call in forge.calls)]
        assert not [text[:200] for text in shown if TOKEN in text]
        assert all(call.headers["authorization"] == f"Bearer {TOKEN}" for call in forge.calls)
        metrics = agent.metrics()
        assert 'gitops_automation_proposals_total{automation="sentiment",mode="pull_request"} 1.0' in metrics
        assert 'gitops_automation_runs_total{automation="sentiment",result="proposed"} 1.0' in metrics
        # The pipeline's prefix emptied: the next look is an error, counted for the shipped alert.
        for version, files in (("v1", files1), ("v2", files2)):
            for path in files:
                s3.delete_object(Bucket="models", Key=f"sentiment/{version}/{path}")
        agent.wait("the look that finds nothing", lambda: _look(agent) == "error", timeout_s=INTERVAL_S + 30)
        assert 'gitops_automation_errors_total{automation="sentiment"} 1.0' in agent.metrics()
    finally:
        agent.stop()


def test_a_verifying_agent_applies_the_pin_its_automation_signed_and_pushed(
    node_env_ray: str, s3: Any, repo: GitRepo, tmp_path: Path, forge: Forge
) -> None:
    files1, digest1 = _model("signed-v1")
    files2, digest2 = _model("signed-v2")
    for path, data in files1.items():
        s3.put_object(Bucket="models", Key=f"signed/v1/{path}", Body=data)
    person, automation_key = make_key(tmp_path / "person-key"), make_key(tmp_path / "automation-key")
    allowed = allowed_signers(tmp_path / "allowed_signers", person, automation_key)
    repo.write("apps/__init__.py", "")
    repo.write("apps/sentiment.py", APP)
    repo.write("deployments/sentiment.toml",
               SPEC.format(version="v1", digest=digest1).replace("s3://models/sentiment/", "s3://models/signed/"))
    repo.write("automation.toml", AUTOMATION.format(interval=INTERVAL_S, api_url=forge.url, mode="commit").replace(
        "s3://models/sentiment/", "s3://models/signed/"))
    first = signed_commit(repo, person, "sentiment v1, and its automation (signed by a person)")
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo.root), str(remote)], check=True)
    agent = AgentProcess(remote, tmp_path, ray.get_runtime_context().gcs_address, extra_args=[
        "--verify-commits", "--allowed-signers", str(allowed), "--signing-key", str(automation_key),
        "--promote-api-url", forge.url,
    ])
    try:
        agent.wait_applied(first)
        agent.wait("the automation's first look", lambda: _look(agent) == "up_to_date")
        for path, data in files2.items():
            s3.put_object(Bucket="models", Key=f"signed/v2/{path}", Body=data)
        agent.wait("the pin pushed", lambda: _look(agent) == "proposed", timeout_s=INTERVAL_S + 30)
        pushed = _git(remote, "rev-parse", "main").strip()
        assert _git(remote, "rev-parse", f"{pushed}^").strip() == first
        assert f'+sha256 = "{digest2}"' in _git(remote, "diff", "-U0", first, pushed)
        verified = subprocess.run(
            ["git", "--git-dir", str(remote), "-c", "gpg.format=ssh", "-c", f"gpg.ssh.allowedSignersFile={allowed}",
             "verify-commit", pushed], capture_output=True, text=True)
        assert verified.returncode == 0, verified.stderr
        assert 'Good "git" signature for automation-key@example.invalid' in verified.stderr
        # The same agent, verifying, applies its own signed commit: Synced at it, serving v2's weights.
        agent.wait_applied(pushed)
        new = hashlib.sha256(files2["weights.bin"]).hexdigest()
        agent.wait("the new weights", lambda: {_weights(agent) for _ in range(4)} == {new}, timeout_s=120)
        entries = agent.get("/history")
        entries = entries["entries"] if isinstance(entries, dict) else entries
        assert next(e for e in entries if e["commit"] == pushed)["result"] == "applied"
        assert forge.calls == []
        shown = [agent.log_path.read_text(), json.dumps(agent.get("/status"))]
        assert not [text[:200] for text in shown if str(automation_key) in text]
        assert "is not in --allowed-signers" not in shown[0]  # the key is listed: no warning
    finally:
        agent.stop()


def _look(agent: AgentProcess) -> str | None:
    shown = agent.get("/status").get("automation", {}).get("automations", [])
    return shown[0]["result"] if shown else None


def _weights(agent: AgentProcess) -> str:
    return str(httpx.get(agent.proxy + "/sentiment", timeout=10).json()["weights"])
