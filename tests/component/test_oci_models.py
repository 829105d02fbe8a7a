"""oci:// models against a real OCI registry on loopback (Debian's docker-registry,
tests.support.oci_registry; no Ray, so the real tier only for the external
program): a modelcar's /models and an artifact's files staged into the node's
cache once, an index's linux/amd64 manifest picked, blobs checked against
their digests (a blob changed in the registry's storage is refused), the
bearer-token flow with credentials that show in no URL or error, hostile
layers refused with nothing written outside the download, and `gitops models
resolve` pinning a tag to what the cache then stages."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from replica.fetching.hub import HubOptions
from replica.fetching.sources import FetchError, FetchProgress
from replica import models
from replica.models import ModelCache, ModelError
from replica.fetching import oci as oci_fetching
from replica.fetching.oci import fetch_oci
from tests.support.oci_registry import LoopbackRegistry, modelcar_layer, oci_registry, token_front
from vocabulary.replicas.model_digests import manifest_digest

pytestmark = pytest.mark.real  # docker-registry, an external program (`make system-deps`)

TAR = "application/vnd.oci.image.layer.v1.tar"
TAR_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
CREDENTIALS = "robot:pa55-w0rd-oci"
TOKEN = "registry-token-0123456789"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackRegistry]:
    with oci_registry(tmp_path_factory.mktemp("registry")) as server:
        yield server


def _digest(files: dict[str, bytes]) -> str:
    return manifest_digest([(path, len(data), hashlib.sha256(data).hexdigest()) for path, data in files.items()])


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _layer_of(registry: LoopbackRegistry, manifest: str, repository: str, index: int) -> str:
    answer = registry.client.get(f"{registry.url}/v2/{repository}/manifests/{manifest}",
                                 headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    return str(answer.json()["layers"][index]["digest"])


@pytest.mark.parametrize("compress", [True, False], ids=["tar+gzip", "tar"])
def test_a_modelcar_by_digest_is_staged_once_per_node_with_only_its_models_directory(
    registry: LoopbackRegistry, tmp_path: Path, compress: bool
) -> None:
    files = {"config.json": b'{"labels": 2}', "weights/model.safetensors": os.urandom(3 * 1024 * 1024)}
    repository = f"acme/modelcar-{'gz' if compress else 'tar'}"
    manifest = registry.push_modelcar(repository, "v1", files, compress=compress)
    source = f"oci://{registry.host}/{repository}@{manifest}"
    staged = ModelCache(tmp_path / "cache").stage("car", source, _digest(files), time.monotonic() + 30)
    assert _tree(staged.path) == files  # the base layer's bin/ and etc/ are never written
    assert staged.fetched_bytes > 3 * 1024 * 1024
    again = ModelCache(tmp_path / "cache").stage("car", source, _digest(files), time.monotonic() + 30)
    assert again.fetched_bytes == 0 and again.path == staged.path
    assert registry.blob_gets(_layer_of(registry, manifest, repository, 1)) == 1


@pytest.mark.parametrize("compress", [True, False], ids=["tar+gzip", "tar"])
def test_a_cold_modelcar_fetch_is_not_read_back_to_check_its_digest(
    registry: LoopbackRegistry, tmp_path: Path, compress: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {"config.json": b'{"labels": 3}', "weights/model.safetensors": os.urandom(2 * 1024 * 1024 + 1),
             "weights/copy.safetensors": b"same"}
    repository = f"acme/hashed-once-{'gz' if compress else 'tar'}"
    manifest = registry.push_modelcar(repository, "v1", files, compress=compress)
    source = f"oci://{registry.host}/{repository}@{manifest}"
    reads: list[Path] = []
    real = models.file_sha256
    monkeypatch.setattr(models, "file_sha256", lambda path: (reads.append(path), real(path))[1])
    staged = ModelCache(tmp_path / "cache").stage("car", source, _digest(files), time.monotonic() + 30)
    assert _tree(staged.path) == files and reads == []
    ModelCache(tmp_path / "cache").stage("car", source, _digest(files), time.monotonic() + 30)
    assert len(reads) == len(files)  # a cache hit reads each file once


def test_an_artifact_is_its_titled_files_and_an_index_names_its_linux_amd64_manifest(
    registry: LoopbackRegistry, tmp_path: Path
) -> None:
    files = {"config.json": b"{}", "model.onnx": os.urandom(100_000)}
    artifact = registry.push_artifact("acme/artifact", "v1", files)
    staged = ModelCache(tmp_path / "cache").stage(
        "art", f"oci://{registry.host}/acme/artifact@{artifact}", _digest(files), time.monotonic() + 30
    )
    assert _tree(staged.path) == files

    amd64 = registry.push_modelcar("acme/multi", "amd64", {"w.bin": b"amd64 weights"})
    arm64 = registry.push_modelcar("acme/multi", "arm64", {"w.bin": b"arm64 weights"})
    index = registry.push_index("acme/multi", "v1", [(arm64, "linux", "arm64"), (amd64, "linux", "amd64")])
    staged = ModelCache(tmp_path / "cache").stage(
        "multi", f"oci://{registry.host}/acme/multi@{index}", _digest({"w.bin": b"amd64 weights"}),
        time.monotonic() + 30,
    )
    assert _tree(staged.path) == {"w.bin": b"amd64 weights"}
    arm_only = registry.push_index("acme/multi", "arm", [(arm64, "linux", "arm64")])
    s390x = registry.push_modelcar("acme/multi", "s390x", {"w.bin": b"s390x"})
    neither = registry.push_index("acme/multi", "other", [(arm64, "linux", "arm64"), (s390x, "linux", "s390x")])
    assert _tree(_fetch(registry, f"acme/multi@{arm_only}", tmp_path / "one")) == {"w.bin": b"arm64 weights"}
    with pytest.raises(FetchError, match=r"no linux/amd64 manifest \(platforms: linux/arm64, linux/s390x\)"):
        _fetch(registry, f"acme/multi@{neither}", tmp_path / "none")


def _fetch(registry: LoopbackRegistry, name: str, dest: Path, credentials: str | None = None,
           progress: FetchProgress | None = None) -> Path:
    fetch_oci(f"oci://{registry.host}/{name}", dest, time.monotonic() + 30, progress or FetchProgress(), credentials)
    return dest


def test_a_wrong_digest_or_a_blob_changed_in_the_registry_is_refused_and_nothing_is_kept(
    registry: LoopbackRegistry, tmp_path: Path
) -> None:
    files = {"w.bin": os.urandom(200_000)}
    manifest = registry.push_modelcar("acme/tampered", "v1", files)
    source = f"oci://{registry.host}/acme/tampered@{manifest}"
    cache = ModelCache(tmp_path / "cache")
    with pytest.raises(ModelError, match="its bytes have sha256 .*, but git pins 1111"):
        cache.stage("m", source, "1" * 64, time.monotonic() + 30)
    with pytest.raises(ModelError, match=r"not found \(404\): no such manifest sha256:2222"):
        cache.stage("m", f"oci://{registry.host}/acme/tampered@sha256:{'2' * 64}", "2" * 64, time.monotonic() + 30)
    assert list((tmp_path / "cache" / "entries").iterdir()) == []
    assert list((tmp_path / "cache" / "tmp").iterdir()) == []

    # The registry's stored blob changed under it (same size): the stream is refused on its digest.
    layer = _layer_of(registry, manifest, "acme/tampered", 1).removeprefix("sha256:")
    stored = registry.log.parent / "storage/docker/registry/v2/blobs/sha256" / layer[:2] / layer / "data"
    original = stored.read_bytes()
    stored.write_bytes(gzip.compress(modelcar_layer({"w.bin": b"x" * 200_000}, compress=False))[: len(original)]
                       .ljust(len(original), b"\0"))
    try:
        with pytest.raises(FetchError, match=f"the blob sha256:{layer} the registry sent has .* refused|is no tar"):
            _fetch(registry, f"acme/tampered@{manifest}", tmp_path / "tampered")
    finally:
        stored.write_bytes(original)


def test_the_bearer_token_flow_with_credentials_that_show_in_no_url_or_error(
    registry: LoopbackRegistry, tmp_path: Path
) -> None:
    files = {"w.bin": os.urandom(50_000)}
    manifest = registry.push_modelcar("acme/private", "v1", files)
    with token_front(registry.url, TOKEN, CREDENTIALS) as front:
        source = f"oci://{front.host}/acme/private@{manifest}"
        staged = ModelCache(tmp_path / "cache").stage(
            "private", source, _digest(files), time.monotonic() + 30, HubOptions(token=CREDENTIALS)
        )
        assert _tree(staged.path) == files
        token_asks = [seen for seen in front.seen if seen[0] == "/token"]
        assert token_asks and all("scope=repository%3Aacme%2Fprivate%3Apull" in query for _, query, _ in token_asks)
        assert all(authorization.startswith("Basic ") for _, _, authorization in token_asks)
        assert all(authorization in ("", f"Bearer {TOKEN}") for path, _, authorization in front.seen
                   if path != "/token")
        assert not any("pa55" in path + query for path, query, _ in front.seen)

        for credentials in (None, "robot:wrong"):
            with pytest.raises(ModelError, match=r"access denied \(401\)") as denied:
                ModelCache(tmp_path / "other").stage(
                    "private", source, _digest(files), time.monotonic() + 30, HubOptions(token=credentials)
                )
            assert "pa55" not in str(denied.value) and "wrong" not in str(denied.value)
        with pytest.raises(FetchError, match="USER:PASSWORD"):
            _fetch(registry, "acme/private@" + manifest, tmp_path / "bad", credentials="no-colon-token")


def _hostile(*members: tarfile.TarInfo, files: dict[str, bytes] | None = None) -> bytes:
    return modelcar_layer(files or {"ok.bin": b"fine"}, compress=False, extra=list(members))


def _info(name: str, kind: bytes = tarfile.REGTYPE, link: str = "", size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, size
    return info


@pytest.mark.parametrize(("member", "why"), [
    (_info("/models/abs.bin", size=4), "absolute path"),
    (_info("models/../../escaped.bin", size=4), "climbs out"),
    (_info("models/evil", tarfile.SYMTYPE, "/etc/passwd"), "symbolic link"),
    (_info("models/evil", tarfile.LNKTYPE, "etc/passwd"), "outside /models"),
    (_info("models/evil", tarfile.LNKTYPE, "models/nothing-here"), "hard link to no file"),
    (_info("models/dev", tarfile.CHRTYPE), "not a file or a directory"),
    (_info("models/fifo", tarfile.FIFOTYPE), "not a file or a directory"),
], ids=["absolute", "dotdot", "symlink", "hardlink-out", "hardlink-dangling", "device", "fifo"])
def test_a_hostile_layer_is_refused_and_writes_nothing_outside_the_download(
    registry: LoopbackRegistry, tmp_path: Path, member: tarfile.TarInfo, why: str
) -> None:
    repository = "acme/hostile"
    manifest = registry.push_image(repository, "bad", [(TAR, _hostile(member))])
    dest = tmp_path / "work" / "dest"
    with pytest.raises(FetchError, match=why):
        _fetch(registry, f"{repository}@{manifest}", dest)
    outside = [p for p in (tmp_path / "work").rglob("*") if not p.is_relative_to(dest)]
    assert outside == []
    assert not any(p.is_symlink() for p in dest.rglob("*"))
    assert not (tmp_path / "escaped.bin").exists()


def test_a_gzip_bomb_stops_at_the_caches_cap_or_its_ratio_and_whiteouts_remove_a_lower_layers_files(
    registry: LoopbackRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb", compresslevel=6) as squeezed, \
            tarfile.open(fileobj=squeezed, mode="w|") as tar:
        tar.addfile(_info("models/zeros.bin", size=32 * 1024 * 1024), _Zeros())
    assert len(packed.getvalue()) < 100_000  # 32 MiB of zeros in a small blob
    bomb = registry.push_image("acme/bomb", "v1", [(TAR_GZIP, packed.getvalue())])
    with pytest.raises(FetchError, match="expands past the cache's cap of 8388608 bytes"):
        _fetch(registry, f"acme/bomb@{bomb}", tmp_path / "bomb", progress=FetchProgress(limit=8 * 1024 * 1024))
    # With no cap, a bomb stops at 100 x the layers' size and a slack (64 MiB; 1 MiB here, to keep it small).
    monkeypatch.setattr(oci_fetching, "EXPANSION_SLACK", 1024 * 1024)
    with pytest.raises(FetchError, match="refused as a decompression bomb"):
        _fetch(registry, f"acme/bomb@{bomb}", tmp_path / "uncapped")

    lower = modelcar_layer({"keep.bin": b"keep", "old.bin": b"old", "sub/a.bin": b"a", "sub/b.bin": b"b"},
                           compress=False)
    upper = modelcar_layer({"sub/c.bin": b"c", "new.bin": b"new"}, compress=False, extra=[
        _info("models/.wh.old.bin"), _info("models/sub/.wh..wh..opq"),
    ])
    manifest = registry.push_image("acme/layered", "v1", [(TAR, lower), (TAR, upper)])
    expected = {"keep.bin": b"keep", "new.bin": b"new", "sub/c.bin": b"c"}
    assert _tree(_fetch(registry, f"acme/layered@{manifest}", tmp_path / "layered")) == expected

    # `gitops models resolve` reads the same layers to the same digest, nothing written.
    done = subprocess.run([sys.executable, "-m", "gitops", "models", "resolve", f"oci://{registry.host}/acme/layered:v1"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f'source = "oci://{registry.host}/acme/layered@{manifest}"\nsha256 = "{_digest(expected)}"\n'


class _Zeros:
    def read(self, count: int = -1) -> bytes:
        return bytes(count if count >= 0 else 0)


def _resolve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gitops", "models", "resolve", *args],
                          capture_output=True, text=True, timeout=60)


def test_resolve_pins_a_tag_to_the_digest_and_sha256_the_cache_then_stages(
    registry: LoopbackRegistry, tmp_path: Path
) -> None:
    files = {"config.json": b"{}", "w.bin": os.urandom(300_000)}
    first = registry.push_modelcar("acme/moving", "stable", files)
    done = _resolve(f"oci://{registry.host}/acme/moving:stable")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f'source = "oci://{registry.host}/acme/moving@{first}"\nsha256 = "{_digest(files)}"\n'
    staged = ModelCache(tmp_path / "cache").stage(
        "moving", f"oci://{registry.host}/acme/moving@{first}", _digest(files), time.monotonic() + 30
    )
    assert _tree(staged.path) == files

    newer = {"config.json": b"{}", "w.bin": os.urandom(1000)}
    second = registry.push_modelcar("acme/moving", "stable", newer)  # the tag moves
    assert f"@{second}" in _resolve(f"oci://{registry.host}/acme/moving:stable").stdout

    artifact = registry.push_artifact("acme/art-resolve", "v1", files)
    assert _resolve(f"oci://{registry.host}/acme/art-resolve:v1").stdout == (
        f'source = "oci://{registry.host}/acme/art-resolve@{artifact}"\nsha256 = "{_digest(files)}"\n'
    )

    missing = _resolve(f"oci://{registry.host}/acme/moving:nope")
    assert missing.returncode == 1
    assert "not found (404): no manifest nope in acme/moving" in missing.stderr
    assert _resolve(f"oci://{registry.host}/acme/moving").returncode == 2  # neither tag nor digest
    assert _resolve(f"oci://{registry.host}/acme/moving:stable", "--pick", "newest").returncode == 2

    with token_front(registry.url, TOKEN, CREDENTIALS) as front:
        token_file = tmp_path / "registry-credentials"
        token_file.write_text(CREDENTIALS + "\n")
        private = _resolve(f"oci://{front.host}/acme/moving:stable", "--token-file", str(token_file))
        assert private.returncode == 0, private.stderr
        assert f"@{second}" in private.stdout and "pa55" not in private.stdout + private.stderr
        denied = _resolve(f"oci://{front.host}/acme/moving:stable")
        assert denied.returncode == 1 and "--token-file" in denied.stderr


def test_validate_refuses_a_tag_at_its_line_and_says_which_digest_it_names_today(
    registry: LoopbackRegistry, tmp_path: Path
) -> None:
    manifest = registry.push_modelcar("acme/validated", "v3", {"w.bin": b"weights"})
    (tmp_path / "deployments").mkdir()

    def validate(host: str) -> subprocess.CompletedProcess[str]:
        (tmp_path / "deployments" / "m.toml").write_text(f'''[models.tiny]
source = "oci://{host}/acme/validated:v3"
sha256 = "{"a" * 64}"
''')
        return subprocess.run([sys.executable, "-m", "gitops", "validate", "deployments", "--root", str(tmp_path)],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)

    answered = validate(registry.host)
    assert answered.returncode == 1
    assert (
        f"deployments/m.toml:2:10: models.tiny.source: the tag 'v3' of oci://{registry.host}/acme/validated is not a "
        f"digest (a tag moves): pin one as @sha256:… (`gitops models resolve oci://{registry.host}/acme/validated:v3` "
        f"prints it and the sha256); today 'v3' is {manifest}"
    ) in answered.stderr
    silent = validate("127.0.0.1:9")  # no registry there: the refusal alone
    assert silent.returncode == 1
    assert "models.tiny.source: the tag 'v3'" in silent.stderr and "today" not in silent.stderr
