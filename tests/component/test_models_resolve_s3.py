"""`gitops models resolve s3://BUCKET/PREFIX/` as a user types it, against an
S3-compatible server on 127.0.0.1 (moto's, as the other models' component tests
use; no Ray): a prefix of model directories and one of model files, each picked
newest and by highest version, printed as the lines a spec pins (the digest
`gitops models digest` prints, and the bytes a node's cache stages); and the
errors, one line each, never a traceback."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from replica.models import ModelCache
from tests.support.moto_s3 import loopback_s3
from vocabulary.replicas.model_digests import manifest_digest, source_problem


@pytest.fixture()
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with loopback_s3(monkeypatch, "models") as client:
        yield client


def _resolve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gitops", "models", "resolve", *args], check=False,
                          capture_output=True, text=True, timeout=120, env=dict(os.environ))


def _pinned(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    pin = tomllib.loads(result.stdout)
    assert set(pin) == {"source", "sha256"} and source_problem(pin["source"]) is None
    return pin


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _newer_second() -> None:
    time.sleep(1.1)  # S3 lists LastModified to the second


def test_a_prefix_of_model_directories_pins_the_directory_the_rule_picks(s3: Any, tmp_path: Path) -> None:
    # v10 is the highest version; v9, uploaded after it, the newest.
    s3.put_object(Bucket="models", Key="sentiment/v10/config.json", Body=b'{"v": 10}')
    s3.put_object(Bucket="models", Key="sentiment/v10/weights/w.bin", Body=b"\x10" * 3000)
    s3.put_object(Bucket="models", Key="sentiment/v9/", Body=b"")  # a folder marker, as consoles make
    _newer_second()
    s3.put_object(Bucket="models", Key="sentiment/v9/config.json", Body=b'{"v": 9}')
    v10 = manifest_digest([("config.json", 9, _sha(b'{"v": 10}')), ("weights/w.bin", 3000, _sha(b"\x10" * 3000))])

    highest = _pinned(_resolve("s3://models/sentiment/", "--pick", "highest-version"))
    assert highest == {"source": "s3://models/sentiment/v10/", "sha256": v10}
    assert _resolve("s3://models/sentiment/", "--pick", "highest-version").stdout == (
        f'source = "s3://models/sentiment/v10/"\nsha256 = "{v10}"\n'
    )
    newest = _pinned(_resolve("s3://models/sentiment/", "--pick", "newest"))
    assert newest["source"] == "s3://models/sentiment/v9/"
    # The digest is the one `models digest` prints for the source, and the one a node's cache checks.
    digest = subprocess.run([sys.executable, "-m", "gitops", "models", "digest", newest["source"]],
                            capture_output=True, text=True, timeout=120, check=True)
    assert digest.stdout == newest["sha256"] + "\n"
    staged = ModelCache(tmp_path / "cache").stage("sentiment", highest["source"], highest["sha256"],
                                                  time.monotonic() + 60)
    assert staged.digest == v10 and (Path(staged.path) / "weights" / "w.bin").read_bytes() == b"\x10" * 3000


def test_a_prefix_of_model_files_pins_the_file_the_rule_and_match_pick(s3: Any) -> None:
    s3.put_object(Bucket="models", Key="onnx/m-1.10.0.onnx", Body=b"ten")
    s3.put_object(Bucket="models", Key="onnx/m-1.10.0.onnx.sha256", Body=_sha(b"ten").encode())
    _newer_second()
    s3.put_object(Bucket="models", Key="onnx/m-1.9.0.onnx", Body=b"nine")
    _newer_second()
    s3.put_object(Bucket="models", Key="onnx/m-1.9.0.onnx.sha256", Body=_sha(b"nine").encode())

    by_version = _pinned(_resolve("s3://models/onnx/", "--pick", "highest-version", "--match", r"\.onnx$"))
    assert by_version == {"source": "s3://models/onnx/m-1.10.0.onnx", "sha256": _sha(b"ten")}
    by_time = _pinned(_resolve("s3://models/onnx/", "--pick", "newest", "--match", r"\.onnx$"))
    assert by_time == {"source": "s3://models/onnx/m-1.9.0.onnx", "sha256": _sha(b"nine")}
    # Without --match the newest entry is the last checksum file: the rule picks what it is told to.
    assert _pinned(_resolve("s3://models/onnx/", "--pick", "newest"))["source"] == "s3://models/onnx/m-1.9.0.onnx.sha256"


def test_errors_are_one_line_and_a_bad_argument_exits_2(s3: Any) -> None:
    s3.put_object(Bucket="models", Key="sentiment/v1/config.json", Body=b"{}")
    s3.put_object(Bucket="models", Key="sentiment/notes.txt", Body=b"hi")
    cases = [
        (("s3://models/sentiment/", "--pick", "newest", "--match", "^v2/$"), 1,
         "s3://models/sentiment/: none of the 2 entries under the prefix matches --match '^v2/$'"),
        (("s3://models/empty/", "--pick", "newest"), 1, "s3://models/empty/: no object under the prefix"),
        (("s3://no-such-bucket/sentiment/", "--pick", "newest"), 1,
         "s3://no-such-bucket/sentiment/: cannot list it (no such bucket)"),
        (("s3://models/sentiment/", "--pick", "highest-version"), 1,
         "s3://models/sentiment/: the prefix holds both files (notes.txt) and directories (v1/): "
         "pass --kind file or --kind directory"),
        (("s3://models/sentiment/", "--pick", "newest", "--match", "(v"), 2,
         "s3://models/sentiment/: --match '(v': not a regular expression"),
        (("s3://models/sentiment/",), 2, "--pick newest or --pick highest-version"),
        (("s3://models/sentiment/v1/config.json", "--pick", "newest"), 2, "a prefix ending in '/'"),
    ]
    for args, code, message in cases:
        result = _resolve(*args)
        assert result.returncode == code, (args, result.stderr)
        assert result.stdout == ""
        assert len(result.stderr.splitlines()) == 1 and message in result.stderr, (args, result.stderr)
    kind = _pinned(_resolve("s3://models/sentiment/", "--pick", "highest-version", "--kind", "directory"))
    assert kind["source"] == "s3://models/sentiment/v1/"
