"""A node's model cache on real files and real locks: a verified read-only
path, one download however many processes stage at once, a corrupt entry
fetched again, a wrong digest naming both digests, LRU eviction sparing
models in use, a deadline; and real fetches over HTTP on 127.0.0.1."""

from __future__ import annotations

import hashlib
import http.server
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from replica.fetching.sources import fetch
from replica.models import ModelCache, ModelError, digest_of, eviction_order
from vocabulary.replicas.model_digests import manifest_digest

WEIGHTS = b"w" * 300_000


def _model_dir(root: Path) -> tuple[Path, str]:
    model = root / "src" / "sentiment"
    (model / "tok").mkdir(parents=True)
    (model / "weights.bin").write_bytes(WEIGHTS)
    (model / "tok" / "vocab.txt").write_bytes(b"a\nb\n")
    digest = manifest_digest([
        ("tok/vocab.txt", 4, hashlib.sha256(b"a\nb\n").hexdigest()),
        ("weights.bin", len(WEIGHTS), hashlib.sha256(WEIGHTS).hexdigest()),
    ])
    return model, digest


def _counting(log: Path) -> Callable[[str, Path, float, Callable[[int], None]], None]:
    def fetcher(source: str, dest: Path, deadline: float, progress: Callable[[int], None]) -> None:
        with log.open("a") as out:
            out.write(f"{os.getpid()}\n")
        time.sleep(0.3)  # long enough for every other process to be waiting
        fetch(source, dest, deadline, progress)

    return fetcher


def _stage_in_a_process(root: str, source: str, digest: str, log: str, result: str) -> None:
    staged = ModelCache(Path(root), fetcher=_counting(Path(log))).stage("m", source, digest, time.monotonic() + 30)
    Path(result).write_text(f"{staged.path}\t{staged.fetched_bytes}")


def test_a_directory_is_staged_read_only_and_verified_and_a_hit_fetches_nothing(tmp_path: Path) -> None:
    model, digest = _model_dir(tmp_path)
    cache = ModelCache(tmp_path / "cache")
    first = cache.stage("sentiment", model.as_uri() + "/", digest, time.monotonic() + 30)
    assert first.fetched_bytes == len(WEIGHTS) + 4
    assert (first.path / "weights.bin").read_bytes() == WEIGHTS
    assert digest_of(first.path, directory=True) == digest
    assert (first.path / "weights.bin").stat().st_mode & 0o222 == 0
    assert first.path.stat().st_mode & 0o222 == 0
    again = ModelCache(tmp_path / "cache").stage("sentiment", model.as_uri() + "/", digest, time.monotonic() + 30)
    assert (again.path, again.fetched_bytes) == (first.path, 0)
    assert list((tmp_path / "cache" / "tmp").iterdir()) == []


def test_several_processes_staging_at_once_download_once(tmp_path: Path) -> None:
    model, digest = _model_dir(tmp_path)
    log, context = tmp_path / "fetches.log", multiprocessing.get_context("spawn")
    results = [tmp_path / f"result{i}" for i in range(4)]
    processes = [
        context.Process(
            target=_stage_in_a_process,
            args=(str(tmp_path / "cache"), model.as_uri() + "/", digest, str(log), str(result)),
        )
        for result in results
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    assert len(log.read_text().splitlines()) == 1
    outcomes = sorted(result.read_text().split("\t")[1] for result in results)
    assert outcomes == ["0", "0", "0", str(len(WEIGHTS) + 4)]


def test_a_corrupt_entry_is_fetched_again(tmp_path: Path) -> None:
    model, digest = _model_dir(tmp_path)
    cache = ModelCache(tmp_path / "cache")
    staged = cache.stage("m", model.as_uri() + "/", digest, time.monotonic() + 30)
    weights = staged.path / "weights.bin"
    os.chmod(staged.path, 0o755)
    os.chmod(weights, 0o644)
    weights.write_bytes(b"tampered")
    again = ModelCache(tmp_path / "cache").stage("m", model.as_uri() + "/", digest, time.monotonic() + 30)
    assert again.fetched_bytes == len(WEIGHTS) + 4
    assert weights.read_bytes() == WEIGHTS


def test_a_wrong_digest_fails_naming_the_model_the_source_and_both_digests(tmp_path: Path) -> None:
    model, digest = _model_dir(tmp_path)
    wrong = "0" * 64
    with pytest.raises(ModelError) as raised:
        ModelCache(tmp_path / "cache").stage("sentiment", model.as_uri() + "/", wrong, time.monotonic() + 30)
    assert str(raised.value) == (
        f"model sentiment ({model.as_uri()}/): its bytes have sha256 {digest}, but git pins {wrong}"
    )
    assert list((tmp_path / "cache" / "entries").iterdir()) == []
    assert list((tmp_path / "cache" / "tmp").iterdir()) == []


def test_a_missing_source_and_a_deadline_fail_with_one_line(tmp_path: Path) -> None:
    cache = ModelCache(tmp_path / "cache")
    with pytest.raises(ModelError, match=r"^model m \(file:///nowhere/m.bin\): no such file: /nowhere/m.bin$"):
        cache.stage("m", "file:///nowhere/m.bin", "0" * 64, time.monotonic() + 30)
    model, digest = _model_dir(tmp_path)
    with pytest.raises(ModelError, match=r"timed out \(load_timeout_s\)"):
        cache.stage("m", model.as_uri() + "/", digest, time.monotonic() - 1)


def test_least_recently_used_models_no_one_uses_are_evicted(tmp_path: Path) -> None:
    sources = []
    for index in range(3):
        file = tmp_path / f"m{index}.bin"
        file.write_bytes(bytes([index]) * 1000)
        sources.append((file.as_uri(), hashlib.sha256(file.read_bytes()).hexdigest()))
    root = tmp_path / "cache"
    holder = ModelCache(root)
    holder.stage("m0", *sources[0], time.monotonic() + 30)  # held by this "replica" for its life
    first = ModelCache(root)
    first.stage("m1", *sources[1], time.monotonic() + 30)
    first.release()  # its replica stopped
    ModelCache(root, max_bytes=2000).stage("m2", *sources[2], time.monotonic() + 30)
    assert sorted(p.name for p in (root / "entries").iterdir()) == sorted([sources[0][1], sources[2][1]])


def test_eviction_order_is_least_recently_used_first_and_spares_models_in_use() -> None:
    entries = {"a": (10, 1.0), "b": (10, 2.0), "c": (10, 3.0)}
    assert eviction_order(entries, set(), need=10, max_bytes=30) == ["a"]
    assert eviction_order(entries, {"a"}, need=20, max_bytes=30) == ["b", "c"]
    assert eviction_order(entries, set(), need=0, max_bytes=30) == []


class _Files(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def http_root(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    root = tmp_path / "served"
    root.mkdir()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: _Files(*a, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_an_http_source_on_loopback_is_fetched_and_verified(http_root: tuple[Path, str], tmp_path: Path) -> None:
    root, base = http_root
    data = os.urandom(20 * 1024 * 1024)  # above one part: parallel ranged reads
    (root / "model.onnx").write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    staged = ModelCache(tmp_path / "cache").stage("m", f"{base}/model.onnx", digest, time.monotonic() + 60)
    assert staged.path.name == "model.onnx" and staged.path.read_bytes() == data
    assert staged.fetched_bytes == len(data)
    with pytest.raises(ModelError, match=r"^model m \(http://127.0.0.1:\d+/nope.bin\): not found"):
        ModelCache(tmp_path / "other-cache").stage("m", f"{base}/nope.bin", digest, time.monotonic() + 60)


def test_the_same_bytes_from_a_source_with_another_name_are_a_cache_hit(tmp_path: Path) -> None:
    first, second = tmp_path / "a.onnx", tmp_path / "renamed.onnx"
    first.write_bytes(WEIGHTS)
    second.write_bytes(WEIGHTS)
    digest = hashlib.sha256(WEIGHTS).hexdigest()
    held = ModelCache(tmp_path / "cache")
    staged = held.stage("a", first.as_uri(), digest, time.monotonic() + 30)
    again = ModelCache(tmp_path / "cache").stage("b", second.as_uri(), digest, time.monotonic() + 30)
    assert (again.path, again.fetched_bytes) == (staged.path, 0)
    assert staged.path.read_bytes() == WEIGHTS
