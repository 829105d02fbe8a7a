"""A cold fetch is read once: what a fetcher hashes as it writes (`replica.fetching.hashing`) is what
the cache checks, so it reads back only files nobody hashed; a tar layer's members are hashed by the
spans they occupy as it streams, whatever its headers (GNU long names, pax sizes, garbage); a file
changed after it was hashed is read again."""

from __future__ import annotations

import hashlib
import io
import os
import random
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from replica import models
from replica.fetching.hashing import MAX_PAX_HEADER, FileDigests, Spans, StreamHash, tar_spans
from replica.fetching.hub import HubOptions
from replica.models import ModelCache, digest_of
from tests.support.hub import FakeHub
from vocabulary.replicas.model_digests import manifest_digest


def _archive(form: int) -> bytes:
    """A tar with what layers hold: a long name, an empty file, a directory, a hard link, big and small files."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=form) as tar:
        def add(name: str, data: bytes, kind: bytes = tarfile.REGTYPE, link: str = "") -> None:
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.size = kind, link, len(data)
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)

        add("models", b"", tarfile.DIRTYPE)
        add("models/config.json", b'{"labels": 2}')
        add("models/" + "deep/" * 40 + "weights.safetensors", os.urandom(700_001))  # a long name: its own header
        add("models/empty", b"")
        add("models/again", b"", tarfile.LNKTYPE, "models/config.json")
        add("models/tail.bin", os.urandom(1536))
    return out.getvalue()


def _expected(archive: bytes) -> Spans:
    spans: Spans = {}
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
        for member in tar:
            if member.isreg():
                data = archive[member.offset_data:member.offset_data + member.size]
                spans[(member.offset_data, member.size)] = hashlib.sha256(data).hexdigest()
    return spans


def _streamed(data: bytes, piece: int, spans: Spans | None = None) -> str:
    hashing = StreamHash(walk=None if spans is None else tar_spans(spans, max_members=1000))
    for start in range(0, len(data), piece):
        hashing.feed(data[start:start + piece])
    return hashing.finish()


@pytest.mark.parametrize("form", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT], ids=["gnu", "pax"])
@pytest.mark.parametrize("piece", [7, 4096, 1 << 20])
def test_a_tar_layers_members_are_hashed_by_their_spans_as_it_streams(form: int, piece: int) -> None:
    archive = _archive(form)
    spans: Spans = {}
    assert _streamed(archive, piece, spans) == hashlib.sha256(archive).hexdigest()
    assert spans == _expected(archive)
    assert len(spans) == 4  # config, weights, empty, tail: the link and the directory have no data


def test_a_pax_size_beyond_the_header_field_is_the_size_hashed() -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("models/w.bin")
        info.size = 4096
        info.pax_headers = {"size": "4096", "comment": "x" * 300}
        tar.addfile(info, io.BytesIO(b"\x01" * 4096))
    archive = out.getvalue()
    spans: Spans = {}
    _streamed(archive, 1000, spans)
    assert spans == _expected(archive)


def test_bytes_that_are_no_tar_are_still_hashed_whole_and_give_no_span() -> None:
    garbage = random.Random(5).randbytes(3 * 1024 * 1024 + 17)
    spans: Spans = {}
    assert _streamed(garbage, 65536, spans) == hashlib.sha256(garbage).hexdigest()
    assert spans == {}


def test_a_pax_header_larger_than_the_bound_is_passed_over_not_read() -> None:
    header = bytearray(512)
    header[0:4] = b"huge"
    header[124:136] = b"%011o\0" % (MAX_PAX_HEADER * 4)
    header[156:157] = b"x"
    archive = bytes(header) + b"9 size=1\n".ljust(MAX_PAX_HEADER * 4, b"\n") + bytes(1024)
    spans: Spans = {}
    assert _streamed(archive, 8192, spans) == hashlib.sha256(archive).hexdigest()
    assert spans == {}


def test_a_file_changed_after_it_was_hashed_is_read_again(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "a.bin").write_bytes(b"first")
    (model / "b.bin").write_bytes(b"second")
    digests = FileDigests()
    digests.record(model / "a.bin", hashlib.sha256(b"first").hexdigest())
    digests.record(model / "b.bin", "0" * 64)  # what a fetcher said; then the file is rewritten
    time.sleep(0.05)  # past the file system's clock tick: the rewrite gets a new modification time
    (model / "b.bin").write_bytes(b"SECOND")
    assert digests.sha256(model / "a.bin") == hashlib.sha256(b"first").hexdigest()
    assert digests.sha256(model / "b.bin") is None
    entries = [("a.bin", 5, hashlib.sha256(b"first").hexdigest()), ("b.bin", 6, hashlib.sha256(b"SECOND").hexdigest())]
    assert digest_of(model, directory=True, hashed=digests) == manifest_digest(entries)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    """The files the cache reads back from disk to hash them."""
    seen: list[Path] = []
    real = models.file_sha256

    def counted(path: Path) -> str:
        seen.append(path)
        return real(path)

    monkeypatch.setattr(models, "file_sha256", counted)
    yield seen


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """A Hub on loopback, the one `HF_ENDPOINT` names for the test."""
    server = FakeHub().start()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    try:
        yield server
    finally:
        server.stop()


def test_a_cold_hf_fetch_is_not_read_back_and_a_cache_hit_reads_it_once(
    reads: list[Path], tmp_path: Path, hub: FakeHub
) -> None:
    files = {"config.json": b'{"hidden": 8}', "model.safetensors": os.urandom(2 * 1024 * 1024 + 5)}
    commit = hub.commit("acme/tiny", files)
    digest = manifest_digest([(p, len(d), hashlib.sha256(d).hexdigest()) for p, d in files.items()])
    source = f"hf://acme/tiny@{commit}"
    cold = ModelCache(tmp_path / "cache").stage("tiny", source, digest, time.monotonic() + 30, HubOptions())
    assert cold.fetched_bytes == sum(len(d) for d in files.values())
    assert reads == []
    hit = ModelCache(tmp_path / "cache").stage("tiny", source, digest, time.monotonic() + 30, HubOptions())
    assert hit.fetched_bytes == 0 and sorted(p.name for p in reads) == ["config.json", "model.safetensors"]


def test_a_continued_hf_download_is_hashed_whole_and_a_wrong_pin_still_fails(
    reads: list[Path], tmp_path: Path, hub: FakeHub
) -> None:
    weights = os.urandom(1024 * 1024 + 3)
    files = {"model.safetensors": weights}
    commit = hub.commit("acme/cut", files)
    digest = manifest_digest([("model.safetensors", len(weights), hashlib.sha256(weights).hexdigest())])
    hub.cut(weights, after=300_000)  # the first download breaks off; the fetch continues it with a Range
    staged = ModelCache(tmp_path / "cache").stage(
        "cut", f"hf://acme/cut@{commit}", digest, time.monotonic() + 30, HubOptions())
    assert (staged.path / "model.safetensors").read_bytes() == weights
    assert reads == []
    wrong = "0" * 64
    with pytest.raises(models.ModelError, match="its bytes have sha256"):
        ModelCache(tmp_path / "other").stage("cut", f"hf://acme/cut@{commit}", wrong, time.monotonic() + 30,
                                             HubOptions())
