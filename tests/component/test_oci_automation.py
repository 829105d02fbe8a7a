"""Artifact automation watching OCI references, against a real OCI registry on loopback
(Debian's docker-registry behind the registries' bearer-token flow with credentials,
tests.support.oci_registry; no Ray, so the real tier only for the external program), a
bare git remote the runner reads and pushes to (`file://`), in commit mode, and in
pull-request mode against a loopback GitHub API (`tests.support.forges`).

- A watched tag that moves (`oci://R/REPO:stable`) moves the pin: the spec's source
  to the new manifest digest and its sha256 to the model's, nothing else of the file,
  the commit naming the tag and both manifest digests; the next look is up to date
  and pulls no blob (a manifest the spec pins already is not read again).
- A watched repository with `pick = "semver"` reads the whole tag list, page by page
  (Link headers, from the token front: Debian's registry sends one page), and pins the highest release `match` lets in; the
  commit says which tag named it. A pre-release pushed later is not proposed.
- In pull-request mode a moved tag opens one pull request whose diff is the pin's two
  lines; the next look proposes nothing new; a later move updates the same request.
- Without the registry's credentials, or with wrong ones, a look is an error result
  naming the flag that gives them; the credentials show in no status, log or commit.
- `gitops automation run --registry-token-file` reads them from a file (a bad one is a
  usage error, no traceback); `gitops models resolve oci://R/REPO --pick semver` picks
  the tag the automation would, and says which.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gitops.commands.automation import build_loop, registry_access
from gitops.commands.models.oci import oci_tags
from gitops.loop.history import History
from gitops.redaction import register_secret
from gitops.loop.metrics import AgentMetrics
from gitops.sources.repos import GitSource
from tests.conftest import GitRepo
from tests.support.forges import Forge
from tests.support.oci_registry import LoopbackRegistry, TokenFront, oci_registry, token_front
from vocabulary.replicas.model_digests import manifest_digest
from vocabulary.replicas.oci_sources import OciReference

pytestmark = pytest.mark.real  # docker-registry, an external program (`make system-deps`)

CREDENTIALS = "automation-robot:oci-automation-pa55word"
TOKEN = "registry-token-automation-0123456789"
FORGE_TOKEN = "ghp_automationForgeToken0123456789"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LoopbackRegistry, TokenFront]]:
    with oci_registry(tmp_path_factory.mktemp("registry")) as server:
        with token_front(server.url, TOKEN, CREDENTIALS, tag_page_size=2) as front:
            yield server, front


def model(label: str) -> tuple[dict[str, bytes], str]:
    files = {"config.json": b"{}", "weights/model.safetensors": os.urandom(20_000) + label.encode()}
    return files, manifest_digest([(p, len(d), hashlib.sha256(d).hexdigest()) for p, d in files.items()])


def push_tags(server: LoopbackRegistry, repository: str, tags: tuple[str, ...]
              ) -> tuple[dict[str, dict[str, bytes]], dict[str, str]]:
    """A model pushed to `repository` under each tag: each tag's files and model digest."""
    files: dict[str, dict[str, bytes]] = {}
    digest: dict[str, str] = {}
    for tag in tags:
        files[tag], digest[tag] = model(tag)
        server.push_modelcar(repository, tag, files[tag])
    return files, digest


SPEC = """\
# The tiny model, a modelcar; automation.tiny moves its pin.
[models.tiny]
source = "{source}"  # pushed by the training pipeline
sha256 = "{digest}"
load_timeout_s = 60

[backends.tiny]
import_path = "apps.tiny:Tiny"
models = ["tiny"]
"""


class World:
    """A spec pinning `first`, automation.toml watching `watch`, and the agent's automation loop."""

    def __init__(self, tmp: Path, front: TokenFront, watch: str, first: str, digest: str, extra: str = "",
                 credentials: str | None = CREDENTIALS, forge: Forge | None = None) -> None:
        self.work = GitRepo(tmp / "work")
        self.work.write("deployments/tiny.toml", SPEC.format(source=first, digest=digest))
        mode = ('mode = "commit"\n' if forge is None else
                f'mode = "pull_request"\nprovider = "github"\nrepository = "acme/serving"\napi_url = "{forge.url}"\n')
        self.work.write("automation.toml", f'[automation.tiny]\nmodel = "tiny"\nwatch = "{watch}"\n{extra}'
                                           f'interval_s = 1\n{mode}')
        self.work.commit("tiny, and its automation")
        self.remote = tmp / "remote.git"
        subprocess.run(["git", "clone", "-q", "--bare", str(self.work.root), str(self.remote)], check=True)
        token_file = tmp / "registry-credentials"
        token_file.write_text(f"{credentials}\n" if credentials else "")
        access = registry_access(str(token_file) if credentials else None, "--automation-registry-token-file")
        if forge is not None:
            register_secret(FORGE_TOKEN)
        self.loop = build_loop(GitSource(f"file://{self.remote}", "main", tmp / "state"), "deployments", None,
                               None if forge is None else FORGE_TOKEN, () if forge is None else (forge.url,),
                               History(tmp / "history.db"), AgentMetrics(), access)

    def look(self) -> dict[str, Any]:
        asyncio.run(self.loop.once(now=lambda: float("inf")))  # every automation is due
        status = self.loop.status()
        assert status["errors"] == [], status
        (shown,) = status["automations"]  # type: ignore[misc]
        return shown  # type: ignore[no-any-return]

    def git(self, *args: str) -> str:
        return subprocess.run(["git", "--git-dir", str(self.remote), *args], check=True, capture_output=True,
                              text=True).stdout

    def changed(self, older: str, newer: str) -> list[str]:
        text = self.git("diff", "-U0", older, newer)
        return [line for line in text.splitlines() if line[:1] in "+-" and not line.startswith(("---", "+++"))]


def _layers(server: LoopbackRegistry, repository: str, manifest: str) -> list[str]:
    answer = server.client.get(f"{server.url}/v2/{repository}/manifests/{manifest}",
                               headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    return [str(layer["digest"]) for layer in answer.json()["layers"]]


def test_a_moved_tag_moves_the_pin_lines_only_and_the_commit_names_the_tag_and_both_digests(
    registry: tuple[LoopbackRegistry, TokenFront], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server, front = registry
    files1, digest1 = model("v1")
    files2, digest2 = model("v2")
    manifest1 = server.push_modelcar("acme/followed", "stable", files1)
    name = f"oci://{front.host}/acme/followed"
    world = World(tmp_path, front, f"{name}:stable", f"{name}@{manifest1}", digest1)
    caplog.set_level(logging.INFO, "gitops.automation")
    assert world.look()["result"] == "up_to_date"
    assert [server.blob_gets(layer) for layer in _layers(server, "acme/followed", manifest1)] == [0, 0]

    before = world.git("rev-parse", "main").strip()
    manifest2 = server.push_modelcar("acme/followed", "stable", files2)  # the tag moves
    shown = world.look()
    assert shown["result"] == "proposed", shown
    assert (shown["new_source"], shown["new_sha256"]) == (f"{name}@{manifest2}", digest2)
    assert world.changed(before, "main") == [
        f'-source = "{name}@{manifest1}"  # pushed by the training pipeline',
        f'-sha256 = "{digest1}"',
        f'+source = "{name}@{manifest2}"  # pushed by the training pipeline',
        f'+sha256 = "{digest2}"',
    ]
    assert world.git("diff", "--name-only", before, "main").split() == ["deployments/tiny.toml"]
    message = world.git("log", "-1", "--format=%B", "main")
    assert f"moves to what {name}:stable names now." in message
    assert f"source: {name}@{manifest1} -> {name}@{manifest2}" in message
    assert f"sha256: {digest1} -> {digest2}" in message

    pulled = [server.blob_gets(layer) for layer in _layers(server, "acme/followed", manifest2)]
    assert world.look()["result"] == "up_to_date"  # the pin git has now: nothing pulled again
    assert [server.blob_gets(layer) for layer in _layers(server, "acme/followed", manifest2)] == pulled
    shown_anywhere = caplog.text + str(world.loop.status()) + world.git("log", "--format=%B", "main")
    assert "pa55word" not in shown_anywhere and TOKEN not in shown_anywhere


def test_semver_picks_the_highest_release_from_every_page_of_the_tag_list(
    registry: tuple[LoopbackRegistry, TokenFront], tmp_path: Path
) -> None:
    server, front = registry
    repository = "acme/versioned"
    files, digest = push_tags(server, repository, ("v1.2.0", "v1.9.0", "v1.10.0", "v2.0.0", "latest"))
    name = f"oci://{front.host}/{repository}"
    # The registry hands the list out in pages of two: every page is read, through the token flow.
    tags = oci_tags(OciReference(front.host, repository), CREDENTIALS, 30)
    assert tags == ["latest", "v1.10.0", "v1.2.0", "v1.9.0", "v2.0.0"]
    pages = [query for path, query, authorization in front.seen
             if path == f"/v2/{repository}/tags/list" and authorization == f"Bearer {TOKEN}"]
    assert pages == ["n=1000", "n=2&last=v1.10.0", "n=2&last=v1.9.0"]

    manifest = server.push_modelcar(repository, "v1.2.0", files["v1.2.0"])
    world = World(tmp_path, front, name, f"{name}@{manifest}", digest["v1.2.0"], extra='pick = "semver"\n'
                  'match = "^v1[.]"\n')
    before = world.git("rev-parse", "main").strip()
    shown = world.look()
    assert shown["result"] == "proposed", shown  # v1.10.0: above v1.9.0, and v2.0.0 is not matched
    assert shown["new_sha256"] == digest["v1.10.0"]
    message = world.git("log", "-1", "--format=%B", "main")
    assert f"moves to what the highest semver tag of {name} matching '^v1[.]' names now." in message
    assert f"named by: {name}:v1.10.0" in message
    assert len(world.changed(before, "main")) == 4

    server.push_modelcar(repository, "v1.11.0-rc.1", model("rc")[0])  # a pre-release `^v1[.]` stops short of
    assert world.look()["result"] == "up_to_date"
    newest, newest_digest = model("v1.10.1")
    newest_manifest = server.push_modelcar(repository, "v1.10.1", newest)
    shown = world.look()
    assert shown["result"] == "proposed", shown
    assert (shown["new_source"], shown["new_sha256"]) == (f"{name}@{newest_manifest}", newest_digest)
    assert f"named by: {name}:v1.10.1" in world.git("log", "-1", "--format=%B", "main")


def test_highest_version_follows_timestamped_builds_by_the_version_group_and_resolve_agrees(
    registry: tuple[LoopbackRegistry, TokenFront], tmp_path: Path
) -> None:
    server, front = registry
    repository = "acme/builds"
    files, digest = push_tags(server, repository, ("main-20261203120000-aaaaaaa", "main-20261204093000-3f2a9c1",
                                                   "pr-7-20271231000000-bbbbbbb", "latest"))
    name = f"oci://{front.host}/{repository}"
    first = server.push_modelcar(repository, "main-20261203120000-aaaaaaa", files["main-20261203120000-aaaaaaa"])
    world = World(tmp_path, front, name, f"{name}@{first}", digest["main-20261203120000-aaaaaaa"],
                  extra='pick = "highest-version"\nmatch = \'^main-(?P<version>[0-9]{14})-\'\n')
    shown = world.look()
    assert shown["result"] == "proposed", shown  # the newest main build; the PR build's later date is not main's
    assert shown["new_sha256"] == digest["main-20261204093000-3f2a9c1"]
    message = world.git("log", "-1", "--format=%B", "main")
    assert f"moves to what the highest-version tag of {name} matching '^main-(?P<version>[0-9]{{14}})-' names now." \
        in message
    assert f"named by: {name}:main-20261204093000-3f2a9c1" in message

    credentials = tmp_path / "registry-credentials"
    credentials.write_text(CREDENTIALS + "\n")
    done = subprocess.run([sys.executable, "-m", "gitops", "models", "resolve", name, "--pick", "highest-version",
                           "--match", "^main-(?P<version>[0-9]{14})-", "--token-file", str(credentials)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"# {name}:main-20261204093000-3f2a9c1: the highest version number among the "
                                  "repository's tags\n")
    assert f'sha256 = "{digest["main-20261204093000-3f2a9c1"]}"' in done.stdout


def test_a_moved_tag_opens_one_pull_request_changing_the_pin_lines_and_a_later_move_updates_it(
    registry: tuple[LoopbackRegistry, TokenFront], tmp_path: Path
) -> None:
    server, front = registry
    forge = Forge("github")
    try:
        files1, digest1 = model("pr-1")
        manifest1 = server.push_modelcar("acme/proposed", "stable", files1)
        name = f"oci://{front.host}/acme/proposed"
        world = World(tmp_path, front, f"{name}:stable", f"{name}@{manifest1}", digest1, forge=forge)
        assert world.look()["result"] == "up_to_date" and forge.calls == []

        files2, digest2 = model("pr-2")
        manifest2 = server.push_modelcar("acme/proposed", "stable", files2)
        shown = world.look()
        assert shown["result"] == "proposed", shown
        assert [(c.method, c.path) for c in forge.calls] == [("GET", "/repos/acme/serving/pulls"),
                                                            ("POST", "/repos/acme/serving/pulls")]
        (pull,) = forge.opened
        assert (pull["head"]["ref"], pull["base"]["ref"]) == ("gitops/automation-tiny", "main")
        assert digest2 in pull["body"] and f"{name}:stable" in pull["body"]
        assert forge.calls[0].headers["authorization"] == f"Bearer {FORGE_TOKEN}"
        assert world.changed("main", "gitops/automation-tiny") == [
            f'-source = "{name}@{manifest1}"  # pushed by the training pipeline',
            f'-sha256 = "{digest1}"',
            f'+source = "{name}@{manifest2}"  # pushed by the training pipeline',
            f'+sha256 = "{digest2}"',
        ]
        assert world.look()["result"] == "proposed_already" and len(forge.calls) == 2

        files3, digest3 = model("pr-3")
        manifest3 = server.push_modelcar("acme/proposed", "stable", files3)
        assert world.look()["result"] == "proposed"
        assert [(c.method, c.path) for c in forge.calls[2:]] == [("GET", "/repos/acme/serving/pulls"),
                                                                ("PATCH", "/repos/acme/serving/pulls/1")]
        assert len(forge.opened) == 1 and digest3 in forge.opened[0]["body"]
        assert world.changed("main", "gitops/automation-tiny")[-2:] == [
            f'+source = "{name}@{manifest3}"  # pushed by the training pipeline', f'+sha256 = "{digest3}"']
        assert FORGE_TOKEN not in str(world.loop.status()) and CREDENTIALS not in forge.opened[0]["body"]
    finally:
        forge.close()


def test_missing_or_wrong_credentials_are_an_error_result_naming_the_flag(
    registry: tuple[LoopbackRegistry, TokenFront], tmp_path: Path
) -> None:
    server, front = registry
    files, digest = model("private")
    manifest = server.push_modelcar("acme/private", "stable", files)
    name = f"oci://{front.host}/acme/private"
    anonymous = World(tmp_path / "anonymous", front, f"{name}:stable", f"{name}@{manifest}", digest, credentials=None)
    shown = anonymous.look()
    assert shown["result"] == "error"
    assert "the registry's token service answered 401: pass --automation-registry-token-file (USER:PASSWORD)" in (
        shown["detail"])
    wrong = World(tmp_path / "wrong", front, f"{name}:stable", f"{name}@{manifest}", digest,
                  credentials="automation-robot:not-the-pa55word-at-all")
    shown = wrong.look()
    assert shown["result"] == "error" and "--automation-registry-token-file" in shown["detail"]
    assert "not-the-pa55word" not in str(wrong.loop.status())


def test_the_cli_takes_the_credentials_from_a_file_and_refuses_a_bad_one(
    registry: tuple[LoopbackRegistry, TokenFront], tmp_path: Path
) -> None:
    server, front = registry
    files, digest = model("cli")
    manifest = server.push_modelcar("acme/cli", "stable", files)
    name = f"oci://{front.host}/acme/cli"
    world = World(tmp_path, front, f"{name}:stable", f"{name}@{manifest}", digest)
    newer = server.push_modelcar("acme/cli", "stable", model("cli-2")[0])
    credentials = tmp_path / "registry-credentials"

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gitops", "automation", "run", "--repo", f"file://{world.remote}",
                               "--dry-run", "--state-dir", str(tmp_path / "state-dir"), *extra],
                              capture_output=True, text=True, timeout=120)

    done = run("--registry-token-file", str(credentials))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("tiny: dry_run: would move tiny")
    assert f'+source = "{name}@{newer}"  # pushed by the training pipeline' in done.stdout
    assert "pa55word" not in done.stdout + done.stderr
    credentials.write_text("no-colon-here\n")
    refused = run("--registry-token-file", str(credentials))
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "--registry-token-file" in refused.stderr and "USER:PASSWORD" in refused.stderr


def test_resolve_picks_the_tag_as_the_automation_does(registry: tuple[LoopbackRegistry, TokenFront],
                                                      tmp_path: Path) -> None:
    server, front = registry
    repository = "acme/resolved"
    files, digest = model("v1.3.0")
    for tag, held in (("v1.2.0", model("v1.2.0")[0]), ("v1.3.0", files), ("v2.0.0-rc.1", model("rc")[0])):
        server.push_modelcar(repository, tag, held)
    manifest = server.push_modelcar(repository, "v1.3.0", files)
    credentials = tmp_path / "registry-credentials"
    credentials.write_text(CREDENTIALS + "\n")

    def resolve(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gitops", "models", "resolve", *args], capture_output=True,
                              text=True, timeout=120)

    name = f"oci://{front.host}/{repository}"
    done = resolve(name, "--pick", "semver", "--token-file", str(credentials))
    assert done.returncode == 0, done.stderr
    assert done.stdout == (f"# {name}:v1.3.0: the highest semantic version among the repository's tags\n"
                           f'source = "{name}@{manifest}"\nsha256 = "{digest}"\n')
    assert "v2.0.0-rc.1" in resolve(name, "--pick", "semver", "--match=-rc", "--token-file",
                                    str(credentials)).stdout
    none = resolve(name, "--pick", "semver", "--match", "^v9", "--token-file", str(credentials))
    assert none.returncode == 1 and f"{name}: none of its 3 tags matches '^v9'" in none.stderr
    for wrong in ([f"{name}:v1.3.0", "--pick", "semver"], [name], [name, "--pick", "newest"],
                  ["s3://models/x/", "--pick", "semver"]):
        refused = resolve(*wrong)
        assert refused.returncode == 2 and "Traceback" not in refused.stderr, (wrong, refused.stderr)
