"""Artifact automation without Ray: an S3-compatible server (moto's, on 127.0.0.1), a
bare git remote the runner reads and pushes to (`file://`), and a loopback server
posing as GitHub's pull-request API (`tests.support.forges`).

- A new model directory under the watched prefix opens one pull request from
  `gitops/automation-NAME`, whose diff against the branch is the pin's lines and
  nothing else; a newer one updates the same request (a fast-forward on its branch);
  the same pin is not proposed twice.
- A model republished at the same key changes only the digest line.
- `commit` mode pushes one commit to the branch, its message naming both digests
  and where they came from.
- A digest whose rollout the history records as aborted is not proposed again, and
  the status says why.
- An hf:// branch moves the pin to the commit the Hub names for it now, with the
  digest of the model's own include/exclude selection (a loopback Hub).
- GitLab gets one merge request, opened then updated.
- `gitops validate` reports `automation.toml`'s errors at their line, and
  `gitops automation run --dry-run` writes nothing.
- A broken store or forge is an error result (counted, in the status, redacted),
  never an exception out of the loop.
- With a signing key (`--signing-key`), the pushed commit (commit mode) and the
  pull request's commit are SSH-signed, and `--verify-commits`' verifier accepts
  them; a key that cannot sign is an error result naming neither the key's path
  nor anything pushed, and `gitops automation run --signing-key` signs too.
"""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gitops.commands.automation import build_loop
from gitops.loop.automation import AutomationLoop
from gitops.loop.history import History
from gitops.loop.metrics import AgentMetrics
from gitops.reconcile.outcomes import HistoryEntry, Outcome
from gitops.redaction import register_secret
from gitops.sources.repos import GitSource
from gitops.sources.signing import SigningKey, load_signing_key
from gitops.sources.verifying import CommitVerifier, Verdict
from tests.conftest import GitRepo
from tests.support.forges import Forge
from tests.support.moto_s3 import loopback_s3
from tests.support.signing_keys import allowed_signers, make_key
from vocabulary.replicas.model_digests import manifest_digest

TOKEN = "automation-token-5b2e9c0d71f4a386"


def model(label: str) -> tuple[dict[str, bytes], str]:
    files = {"weights.bin": f"weights {label}".encode() * 100, "config.json": b"{}"}
    return files, manifest_digest([(p, len(d), hashlib.sha256(d).hexdigest()) for p, d in files.items()])


def spec(source: str, digest: str) -> str:
    return f"""\
# The sentiment model; automation.sentiment moves its pin.
[models.sentiment]
source = "{source}"  # published by the training pipeline
sha256 = "{digest}"
load_timeout_s = 60

[backends.sentiment]
import_path = "apps.sentiment:Sentiment"
models = ["sentiment"]
"""


def automation_file(api_url: str, mode: str = "pull_request", watch: str = "s3://models/sentiment/",
                    pick: str = "highest-version", provider: str = "github") -> str:
    return f"""\
[automation.sentiment]
model = "sentiment"
watch = "{watch}"
pick = "{pick}"
interval_s = 1
mode = "{mode}"
provider = "{provider}"
repository = "acme/serving"
api_url = "{api_url}"
"""


class World:
    def __init__(self, tmp: Path, s3: Any, forge: Forge, mode: str = "pull_request", first: str = "v1/",
                 watch: str = "s3://models/sentiment/", pick: str = "highest-version",
                 signing_key: SigningKey | None = None) -> None:
        api_url = forge.url if forge.kind == "github" else f"{forge.url}/api/v4"
        self.s3, self.forge = s3, forge
        self.work = GitRepo(tmp / "work")
        if first.endswith("/"):  # a model directory
            files, self.first = model("v1")
            self.publish(first, files)
        else:  # a model file
            s3.put_object(Bucket="models", Key=f"sentiment/{first}", Body=b"weights v1")
            self.first = hashlib.sha256(b"weights v1").hexdigest()
        self.work.write("deployments/sentiment.toml", spec(f"{watch}{first}", self.first))
        self.work.write("automation.toml", automation_file(api_url, mode, watch, pick, forge.kind))
        self.work.commit("sentiment v1")
        self.remote = tmp / "remote.git"
        subprocess.run(["git", "clone", "-q", "--bare", str(self.work.root), str(self.remote)], check=True)
        self.metrics = AgentMetrics()
        self.history = History(tmp / "history.db")
        register_secret(TOKEN)
        source = GitSource(f"file://{self.remote}", "main", tmp / "state")
        self.loop: AutomationLoop = build_loop(
            source, "deployments", None, TOKEN, (api_url,), self.history, self.metrics, signing_key=signing_key,
        )

    def publish(self, directory: str, files: dict[str, bytes]) -> None:
        for path, data in files.items():
            self.s3.put_object(Bucket="models", Key=f"sentiment/{directory}{path}", Body=data)

    def look(self) -> dict[str, Any]:
        asyncio.run(self.loop.once(now=lambda: float("inf")))  # every automation is due
        status = self.loop.status()
        assert status["errors"] == [], status
        (shown,) = status["automations"]  # type: ignore[misc]
        return shown  # type: ignore[no-any-return]

    def git(self, *args: str) -> str:
        return subprocess.run(["git", "--git-dir", str(self.remote), *args], check=True, capture_output=True,
                              text=True).stdout

    def diff(self, branch: str) -> list[str]:
        text = self.git("diff", "-U0", "main", branch)
        return [line for line in text.splitlines() if line[:1] in "+-" and not line.startswith(("---", "+++"))]


@pytest.fixture()
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with loopback_s3(monkeypatch, "models") as client:
        yield client


@pytest.fixture()
def forge() -> Iterator[Forge]:
    github = Forge("github")
    yield github
    github.close()


def test_a_new_model_opens_one_pull_request_and_a_newer_one_updates_it(tmp_path: Path, s3: Any, forge: Forge) -> None:
    world = World(tmp_path, s3, forge)
    assert world.look()["result"] == "up_to_date"
    assert forge.calls == []

    files, second = model("v2")
    world.publish("v2/", files)
    shown = world.look()
    assert shown["result"] == "proposed", shown
    assert shown["new_sha256"] == second and shown["old_sha256"] == world.first
    assert [(c.method, c.path) for c in forge.calls] == [("GET", "/repos/acme/serving/pulls"),
                                                        ("POST", "/repos/acme/serving/pulls")]
    (pull,) = forge.opened
    assert (pull["head"]["ref"], pull["base"]["ref"]) == ("gitops/automation-sentiment", "main")
    assert second in pull["body"] and world.first in pull["body"]
    assert forge.calls[0].headers["authorization"] == f"Bearer {TOKEN}"
    # The pull request changes the pin's lines and nothing else: comments and layout stay.
    assert world.diff("gitops/automation-sentiment") == [
        '-source = "s3://models/sentiment/v1/"  # published by the training pipeline',
        f'-sha256 = "{world.first}"',
        '+source = "s3://models/sentiment/v2/"  # published by the training pipeline',
        f'+sha256 = "{second}"',
    ]
    message = world.git("log", "-1", "--format=%B", "gitops/automation-sentiment")
    assert f"sha256: {world.first} -> {second}" in message
    assert "source: s3://models/sentiment/v1/ -> s3://models/sentiment/v2/" in message
    assert "highest-version under s3://models/sentiment/" in message

    assert world.look()["result"] == "proposed_already"  # no second request, no push
    assert len(forge.calls) == 2
    first_proposal = world.git("rev-parse", "gitops/automation-sentiment").strip()

    files, third = model("v3")
    world.publish("v3/", files)
    assert world.look()["result"] == "proposed"
    assert [(c.method, c.path) for c in forge.calls[2:]] == [("GET", "/repos/acme/serving/pulls"),
                                                            ("PATCH", "/repos/acme/serving/pulls/1")]
    assert len(forge.opened) == 1 and third in forge.opened[0]["body"]
    proposal = world.git("rev-parse", "gitops/automation-sentiment").strip()
    assert world.git("merge-base", "--is-ancestor", first_proposal, proposal) == ""  # a fast-forward
    assert world.diff("gitops/automation-sentiment")[-1] == f'+sha256 = "{third}"'

    metrics = world.metrics.render().decode()
    assert 'gitops_automation_proposals_total{automation="sentiment",mode="pull_request"} 2.0' in metrics
    assert 'gitops_automation_runs_total{automation="sentiment",result="proposed_already"} 1.0' in metrics


def test_gitlab_gets_one_merge_request_opened_then_updated(tmp_path: Path, s3: Any) -> None:
    gitlab = Forge("gitlab")
    try:
        world = World(tmp_path, s3, gitlab)
        for label in ("v2", "v3"):
            files, digest = model(label)
            world.publish(f"{label}/", files)
            assert world.look()["result"] == "proposed"
        assert [(c.method, c.raw_path) for c in gitlab.calls] == [
            ("GET", "/api/v4/projects/acme%2Fserving/merge_requests"),
            ("POST", "/api/v4/projects/acme%2Fserving/merge_requests"),
            ("GET", "/api/v4/projects/acme%2Fserving/merge_requests"),
            ("PUT", "/api/v4/projects/acme%2Fserving/merge_requests/1"),
        ]
        (request,) = gitlab.opened
        assert (request["source_branch"], request["target_branch"]) == ("gitops/automation-sentiment", "main")
        assert digest in request["description"] and gitlab.calls[0].headers["private-token"] == TOKEN
    finally:
        gitlab.close()


def test_a_model_republished_at_its_key_changes_only_the_digest_line(tmp_path: Path, s3: Any, forge: Forge) -> None:
    world = World(tmp_path, s3, forge, first="sentiment.onnx", pick="newest")
    assert world.look()["result"] == "up_to_date"
    s3.put_object(Bucket="models", Key="sentiment/sentiment.onnx", Body=b"retrained weights")
    assert world.look()["result"] == "proposed"
    new = hashlib.sha256(b"retrained weights").hexdigest()
    assert world.diff("gitops/automation-sentiment") == [f'-sha256 = "{world.first}"', f'+sha256 = "{new}"']


def test_commit_mode_pushes_a_commit_naming_both_digests(tmp_path: Path, s3: Any, forge: Forge) -> None:
    world = World(tmp_path, s3, forge, mode="commit")
    before = world.git("rev-parse", "main").strip()
    files, second = model("v2")
    world.publish("v2/", files)
    shown = world.look()
    assert shown["result"] == "proposed" and "pushed" in shown["detail"], shown
    assert forge.calls == []
    assert world.git("rev-parse", "main^").strip() == before
    subject, _, body = world.git("log", "-1", "--format=%B", "main").partition("\n")
    assert subject == f"automation sentiment: sentiment sha256 {world.first[:12]} -> {second[:12]}"
    assert f"sha256: {world.first} -> {second}" in body
    assert world.git("show", "--format=%an", "-s", "main").strip() == "ray-gitops automation"
    assert world.look()["result"] == "up_to_date"


def test_a_pin_whose_canary_failed_is_not_proposed_again(tmp_path: Path, s3: Any, forge: Forge) -> None:
    world = World(tmp_path, s3, forge, mode="commit")
    files, second = model("v2")
    world.publish("v2/", files)
    assert world.look()["result"] == "proposed"
    pushed = world.git("rev-parse", "main").strip()
    # The agent applied the pushed commit, its canary failed and traffic went back;
    # then a person reverted the pin in git.
    for result in (Outcome.APPLIED, Outcome.ABORTED):
        world.history.record(HistoryEntry(pushed, "main", 0.0, "pin", 0.0, 1.0, result))
    subprocess.run(["git", "-C", str(world.work.root), "pull", "-q", str(world.remote), "main"], check=True)
    world.work.git("revert", "--no-edit", "HEAD")
    world.work.git("push", "-q", str(world.remote), "HEAD:main")
    reverted = world.git("rev-parse", "main").strip()

    shown = world.look()
    assert shown["result"] == "quarantined", shown
    assert shown["new_sha256"] == second
    assert f"its rollout aborted (a failed canary check) at commit {pushed[:12]}" in shown["detail"]
    assert world.git("rev-parse", "main").strip() == reverted  # nothing pushed
    assert forge.calls == []

    files, third = model("v3")  # a newer model is proposed
    world.publish("v3/", files)
    shown = world.look()
    assert shown["result"] == "proposed" and shown["new_sha256"] == third


@pytest.mark.parametrize("mode", ["commit", "pull_request"])
def test_with_a_signing_key_the_proposed_commit_is_signed_and_verifies(
    tmp_path: Path, s3: Any, forge: Forge, mode: str
) -> None:
    key = make_key(tmp_path / "automation-key")
    world = World(tmp_path, s3, forge, mode=mode, signing_key=load_signing_key(str(key), "--signing-key"))
    files, _ = model("v2")
    world.publish("v2/", files)
    assert world.look()["result"] == "proposed"
    proposed = world.git("rev-parse", "main" if mode == "commit" else "gitops/automation-sentiment").strip()
    trusting = allowed_signers(tmp_path / "allowed_signers", key)
    assert CommitVerifier(trusting).verify(world.remote, proposed).verdict is Verdict.VALID
    verified = subprocess.run(
        ["git", "--git-dir", str(world.remote), "-c", "gpg.format=ssh", "-c",
         f"gpg.ssh.allowedSignersFile={trusting}", "verify-commit", proposed], capture_output=True, text=True)
    assert verified.returncode == 0, verified.stderr


def test_a_key_that_cannot_sign_is_an_error_result_and_nothing_is_pushed(
    tmp_path: Path, s3: Any, forge: Forge
) -> None:
    key = make_key(tmp_path / "vanishing-key")
    world = World(tmp_path, s3, forge, mode="commit", signing_key=load_signing_key(str(key), "--signing-key"))
    before = world.git("rev-parse", "main").strip()
    key.unlink()  # checked at start, gone at the look
    files, _ = model("v2")
    world.publish("v2/", files)
    shown = world.look()
    assert shown["result"] == "error", shown
    assert shown["detail"].startswith("commit on ") and "the --signing-key could not sign it" in shown["detail"]
    assert "nothing pushed" in shown["detail"]
    assert str(key) not in shown["detail"]
    assert world.git("rev-parse", "main").strip() == before
    assert 'gitops_automation_errors_total{automation="sentiment"} 1.0' in world.metrics.render().decode()


def test_the_cli_signs_with_its_signing_key(
    tmp_path: Path, s3: Any, forge: Forge, capsys: pytest.CaptureFixture[str]
) -> None:
    from gitops.cli import main

    key = make_key(tmp_path / "cli-key")
    world = World(tmp_path, s3, forge, mode="commit")
    files, _ = model("v2")
    world.publish("v2/", files)
    assert main(["automation", "run", "--repo", f"file://{world.remote}", "--state-dir", str(tmp_path / "none"),
                 "--signing-key", str(key)]) == 0
    assert capsys.readouterr().out.startswith("sentiment: proposed: pushed ")
    pushed = world.git("rev-parse", "main").strip()
    trusting = allowed_signers(tmp_path / "allowed_signers", key)
    assert CommitVerifier(trusting).verify(world.remote, pushed).verdict is Verdict.VALID


def test_errors_are_results_counted_and_redacted(tmp_path: Path, s3: Any, forge: Forge) -> None:
    world = World(tmp_path, s3, forge)
    files, _ = model("v2")
    world.publish("v2/", files)
    forge.close()  # the forge does not answer
    shown = world.look()
    assert shown["result"] == "error", shown
    assert TOKEN not in str(shown)
    world.s3.put_object(Bucket="models", Key="sentiment/v10/weights.bin", Body=b"x")
    world.s3.put_object(Bucket="models", Key="sentiment/r10/weights.bin", Body=b"y")  # a tie of versions
    shown = world.look()
    assert shown["result"] == "error" and "v10" in shown["detail"], shown
    metrics = world.metrics.render().decode()
    assert 'gitops_automation_errors_total{automation="sentiment"} 2.0' in metrics


def test_validate_reports_automation_errors_at_their_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gitops.cli import main

    (tmp_path / "deployments" / "apps").mkdir(parents=True)
    (tmp_path / "deployments" / "__init__.py").write_text("")
    (tmp_path / "deployments" / "apps" / "__init__.py").write_text("")
    app = "class Sentiment:\n    def __call__(self, request):\n        return {}\n"
    (tmp_path / "deployments" / "apps" / "sentiment.py").write_text(app)
    (tmp_path / "deployments" / "sentiment.toml").write_text(
        spec("s3://models/sentiment/v1/", "a" * 64).replace("apps.sentiment", "deployments.apps.sentiment"))
    (tmp_path / "automation.toml").write_text(
        '[automation.sentiment]\nmodel = "sentimnet"\nwatch = "s3://models/sentiment/"\npick = "newest"\n'
        'mode = "commit"\n\n[automation.llm]\nmodel = "sentiment"\nwatch = "oci://r/llm:latest"\npick = "semver"\n'
        'mode = "commit"\n')
    assert main(["validate", str(tmp_path / "deployments"), "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "automation.toml:10:1: automation.llm.pick: is for an oci:// repository's tags (oci://r/llm); " \
           "oci://r/llm:latest follows one tag" in err
    assert "automation.toml:2:9: automation.sentiment.model: no [models.sentimnet] in the spec files " \
           "(did you mean 'sentiment'?)" in err
    (tmp_path / "automation.toml").write_text(
        '[automation.sentiment]\nmodel = "sentiment"\nwatch = "s3://models/sentiment/"\npick = "newest"\nmode = "commit"\n')
    assert main(["validate", str(tmp_path / "deployments"), "--root", str(tmp_path)]) == 0


def test_the_cli_looks_once_dry_run_writes_nothing(
    tmp_path: Path, s3: Any, forge: Forge, capsys: pytest.CaptureFixture[str]
) -> None:
    from gitops.cli import main

    world = World(tmp_path, s3, forge, mode="commit")
    files, second = model("v2")
    world.publish("v2/", files)
    before = world.git("rev-parse", "main").strip()
    args = ["automation", "run", "--repo", f"file://{world.remote}", "--state-dir", str(tmp_path / "none")]
    assert main([*args, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"sentiment: dry_run: would move sentiment {world.first[:12]} -> {second[:12]} (commit to main)")
    assert f'-sha256 = "{world.first}"\n+sha256 = "{second}"' in out.replace(
        '+source = "s3://models/sentiment/v2/"  # published by the training pipeline\n', "").replace(
        '-source = "s3://models/sentiment/v1/"  # published by the training pipeline\n', "")
    assert world.git("rev-parse", "main").strip() == before
    assert main(args) == 0
    assert capsys.readouterr().out.startswith("sentiment: proposed: pushed ")
    assert world.git("rev-parse", "main^").strip() == before
    assert main(args) == 0
    assert capsys.readouterr().out.startswith(f"sentiment: up_to_date: sentiment is at {second[:12]}")


def test_an_hf_branch_moves_the_pin_to_its_new_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.hub import FakeHub

    hub = FakeHub().start()
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_TOKEN_PATH", "/nonexistent/token")
    try:
        first = hub.commit("acme/llm", {"config.json": b"{}", "model.safetensors": b"w1" * 1000, "README.md": b"x"})
        work = GitRepo(tmp_path / "work")
        text = f"""\
# The LLM, followed on its main branch.
[models.llm]
source = "hf://acme/llm@{first}"
sha256 = "{'0' * 64}"
include = ["*.json", "*.safetensors"]
"""
        work.write("deployments/llm.toml", text)
        work.write("automation.toml", '[automation.llm]\nmodel = "llm"\nwatch = "hf://acme/llm@main"\nmode = "commit"\n')
        work.commit("llm")
        remote = tmp_path / "remote.git"
        subprocess.run(["git", "clone", "-q", "--bare", str(work.root), str(remote)], check=True)
        loop = build_loop(GitSource(f"file://{remote}", "main", tmp_path / "state"), "deployments", None, None, (),
                          History(tmp_path / "history.db"), AgentMetrics())
        second = hub.commit("acme/llm", {"config.json": b"{}", "model.safetensors": b"w2" * 1000, "README.md": b"y"})
        asyncio.run(loop.once(now=lambda: float("inf")))
        (shown,) = loop.status()["automations"]  # type: ignore[misc]
        assert shown["result"] == "proposed", shown
        assert shown["new_source"] == f"hf://acme/llm@{second}"
        selected = {"config.json": b"{}", "model.safetensors": b"w2" * 1000}  # the model's include, README left out
        assert shown["new_sha256"] == manifest_digest(
            [(p, len(d), hashlib.sha256(d).hexdigest()) for p, d in selected.items()])
        diff = subprocess.run(["git", "--git-dir", str(remote), "diff", "-U0", "main^", "main"], check=True,
                              capture_output=True, text=True).stdout
        assert [line for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("---", "+++")] == [
            f'-source = "hf://acme/llm@{first}"', f'-sha256 = "{"0" * 64}"',
            f'+source = "hf://acme/llm@{second}"', f'+sha256 = "{shown["new_sha256"]}"',
        ]
    finally:
        hub.stop()
