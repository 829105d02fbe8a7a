"""hf:// models against a Hub on loopback (tests.support.hub): fetched into the
node's cache with the token, continued after an interrupted download, refused
when the bytes do not match the pin, never showing the token; `gitops models
resolve` pins a branch; `gitops validate` says which commit a refused branch
names today."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from replica.fetching import hub as hub_fetching
from replica.fetching.hub import HubOptions
from replica.models import ModelCache, ModelError
from tests.support.hub import FakeHub
from vocabulary.replicas.model_digests import manifest_digest

TOKEN = "hf_testTOKENvalue0123456789"
REPO = "acme/tiny-bert"


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    server = FakeHub(token=TOKEN).start()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_TOKEN_PATH", "/nonexistent/token")
    try:
        yield server
    finally:
        server.stop()


def _repository(hub: FakeHub) -> tuple[str, dict[str, bytes], str]:
    """A small model repository: its commit, the files a model selects and their digest."""
    weights = os.urandom(3 * 1024 * 1024)
    files = {"config.json": b'{"hidden": 8}', "model.safetensors": weights,
             "pytorch_model.bin": os.urandom(2048), "README.md": b"# tiny"}
    commit = hub.commit(REPO, files)
    chosen = {path: files[path] for path in ("config.json", "model.safetensors")}
    digest = manifest_digest([(p, len(d), hashlib.sha256(d).hexdigest()) for p, d in chosen.items()])
    return commit, chosen, digest


SELECTION = HubOptions(include=("*.json", "*.safetensors"), token=TOKEN)


def test_a_selection_is_fetched_into_the_cache_with_the_token_and_staged_once(hub: FakeHub, tmp_path: Path) -> None:
    commit, chosen, digest = _repository(hub)
    source = f"hf://{REPO}@{commit}"
    staged = ModelCache(tmp_path / "cache").stage("tiny", source, digest, time.monotonic() + 30, SELECTION)
    assert sorted(p.name for p in staged.path.iterdir()) == ["config.json", "model.safetensors"]
    assert (staged.path / "model.safetensors").read_bytes() == chosen["model.safetensors"]
    assert staged.fetched_bytes == sum(len(d) for d in chosen.values())
    assert hub.gets("/pytorch_model.bin") == 0  # excluded files are never fetched
    again = ModelCache(tmp_path / "cache").stage("tiny", source, digest, time.monotonic() + 30, SELECTION)
    assert again.fetched_bytes == 0 and again.path == staged.path


def test_an_interrupted_download_is_continued_by_the_next_fetch(
    hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commit, chosen, digest = _repository(hub)
    source = f"hf://{REPO}@{commit}"
    weights = chosen["model.safetensors"]
    monkeypatch.setattr(hub_fetching, "_ATTEMPTS", 1)  # the first fetch gives up at the first break
    hub.cut(weights, 2 * 1024 * 1024)
    cache = ModelCache(tmp_path / "cache")
    with pytest.raises(ModelError, match="the connection broke"):
        cache.stage("tiny", source, digest, time.monotonic() + 30, SELECTION)
    kept = tmp_path / "cache" / "tmp" / f"{digest}.partial" / "model.safetensors"
    assert kept.stat().st_size == 2 * 1024 * 1024
    # The next start (another process, or this one) continues from there.
    staged = ModelCache(tmp_path / "cache").stage("tiny", source, digest, time.monotonic() + 30, SELECTION)
    assert (staged.path / "model.safetensors").read_bytes() == weights
    assert ("GET", f"/lfs/{hashlib.sha256(weights).hexdigest()}", f"bytes={2 * 1024 * 1024}-") in hub.requests
    assert list((tmp_path / "cache" / "tmp").iterdir()) == []


def test_a_selection_that_does_not_match_the_pin_fails_and_leaves_nothing(hub: FakeHub, tmp_path: Path) -> None:
    commit, _, digest = _repository(hub)
    wrong = "0" * 64
    with pytest.raises(ModelError) as failed:
        ModelCache(tmp_path / "cache").stage("tiny", f"hf://{REPO}@{commit}", wrong, time.monotonic() + 30, SELECTION)
    assert str(failed.value) == f"model tiny (hf://{REPO}@{commit}): its bytes have sha256 {digest}, but git pins {wrong}"
    assert list((tmp_path / "cache" / "tmp").iterdir()) == []
    assert list((tmp_path / "cache" / "entries").iterdir()) == []


def test_a_missing_or_wrong_token_is_access_denied_and_no_error_shows_a_token(hub: FakeHub, tmp_path: Path) -> None:
    commit, _, digest = _repository(hub)
    source = f"hf://{REPO}@{commit}"
    for options in (HubOptions(SELECTION.include), HubOptions(SELECTION.include, token="hf_wrongTOKEN42")):
        with pytest.raises(ModelError) as failed:
            ModelCache(tmp_path / "cache").stage("tiny", source, digest, time.monotonic() + 30, options)
        assert "access denied (401) by the Hub" in str(failed.value)
        for token in (TOKEN, "hf_wrongTOKEN42"):
            assert token not in str(failed.value) and token not in repr(options)
    unknown = f"hf://{REPO}@{'f' * 40}"
    with pytest.raises(ModelError, match="not found"):
        ModelCache(tmp_path / "cache").stage("tiny", unknown, digest, time.monotonic() + 30, SELECTION)


def _gitops(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gitops", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_resolve_prints_the_pinned_source_and_the_selections_digest(hub: FakeHub, tmp_path: Path) -> None:
    commit, _, digest = _repository(hub)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    args = ("models", "resolve", f"hf://{REPO}@main", "--include", "*.json", "--include", "*.safetensors")
    pinned = _gitops(*args, "--token-file", str(token_file), cwd=tmp_path, env=dict(os.environ))
    assert pinned.returncode == 0, pinned.stderr
    assert pinned.stdout == (
        f'source = "hf://{REPO}@{commit}"\nsha256 = "{digest}"\ninclude = ["*.json", "*.safetensors"]\n'
    )
    by_env = _gitops(*args, cwd=tmp_path, env={**os.environ, "HF_TOKEN": TOKEN})
    assert by_env.stdout == pinned.stdout
    # The pin is what the cache stages.
    staged = ModelCache(tmp_path / "cache").stage("tiny", f"hf://{REPO}@{commit}", digest, time.monotonic() + 30, SELECTION)
    assert staged.digest == digest
    refused = _gitops(*args, cwd=tmp_path, env={**os.environ, "HF_TOKEN": "hf_wrongTOKEN42"})
    assert refused.returncode != 0
    assert "access denied (401) by the Hub" in refused.stderr
    assert "hf_wrongTOKEN42" not in refused.stderr + refused.stdout
    other = _gitops("models", "resolve", "gs://bucket/model/", cwd=tmp_path, env=dict(os.environ))
    assert other.returncode == 1
    assert "resolve takes hf://ORG/NAME@REVISION, s3://BUCKET/PREFIX/ or oci://REGISTRY/REPO:TAG" in other.stderr


def test_validate_refuses_a_branch_at_its_line_and_says_which_commit_it_names_today(
    tmp_path: Path
) -> None:
    server = FakeHub().start()  # a public repository: no token needed to resolve it
    try:
        commit = server.commit(REPO, {"config.json": b"{}"})
        (tmp_path / "deployments").mkdir()
        (tmp_path / "deployments" / "m.toml").write_text(f'''[models.tiny]
source = "hf://{REPO}@main"
sha256 = "{"a" * 64}"
''')
        env = {**os.environ, "HF_ENDPOINT": server.url}
        result = _gitops("validate", "deployments", "--root", str(tmp_path), cwd=tmp_path, env=env)
        offline = _gitops("validate", "deployments", "--root", str(tmp_path), cwd=tmp_path,
                          env={**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9"})
    finally:
        server.stop()
    assert result.returncode == 1
    assert (
        f"deployments/m.toml:2:10: models.tiny.source: the revision 'main' of hf://{REPO} is not a full commit "
        f"hash (a branch or a tag moves): pin one (`gitops models resolve hf://{REPO}@main` prints it and the sha256); "
        f"today 'main' is commit {commit}"
    ) in result.stderr
    assert offline.returncode == 1
    assert "models.tiny.source: the revision 'main'" in offline.stderr and "today" not in offline.stderr
