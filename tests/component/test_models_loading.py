"""Models through the loader and the CLI: a backend's configs carry its
models' sources, its version their digests; `gitops validate` locates a bad
table; `gitops models digest` prints what a table pins."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gitops.sources.trees import MemoryTree
from gitops.specs.loading import Loader
from tests.conftest import GitRepo
from vocabulary.replicas.model_digests import manifest_digest

A, B = "a" * 64, "b" * 64
APP = "class S:\n    def __call__(self, r):\n        return 1\n"
SPEC = '''[models.sentiment]
source = "s3://models/sentiment/"
sha256 = "{digest}"

[backends.s]
import_path = "apps.s:S"
models = ["sentiment"]

[backends.plain]
import_path = "apps.s:S"
'''


def _load(digest: str) -> tuple[str, str, dict[str, object]]:
    tree = MemoryTree({"deployments/s.toml": SPEC.format(digest=digest), "apps/s.py": APP})
    state = Loader().load_tree(tree, "deployments").state
    assert state is not None
    s = state.backends["s"]
    return s.version, state.backends["plain"].version, s.model_dump(mode="json")["model_sources"]


def test_a_backend_carries_its_models_and_a_new_digest_is_a_new_version_of_it_only() -> None:
    version_a, plain_a, sources = _load(A)
    version_b, plain_b, _ = _load(B)
    assert sources == {
        "sentiment": {"name": "sentiment", "source": "s3://models/sentiment/", "sha256": A, "load_timeout_s": 600.0,
                      "include": [], "exclude": [], "token_secret": None}
    }
    assert "+m" in version_a and version_a != version_b
    assert plain_a == plain_b and "+m" not in plain_a


def _gitops(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gitops", *args], check=False, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_validate_locates_a_bad_model_table(tmp_path: Path) -> None:
    (tmp_path / "deployments").mkdir()
    (tmp_path / "apps").mkdir()
    (tmp_path / "apps" / "s.py").write_text(APP)
    (tmp_path / "deployments" / "s.toml").write_text(SPEC.format(digest="xyz").replace('"sentiment"]', '"nope"]'))
    result = _gitops("validate", "deployments", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    lines = sorted(result.stdout.splitlines() + result.stderr.splitlines())
    assert any(line.startswith("deployments/s.toml:3:10: models.sentiment.sha256: must be 64 hex digits") for line in lines)
    assert any(line.startswith("deployments/s.toml:7:11: backends.s.models[0]: no [models.nope]") for line in lines)
    assert "Traceback" not in result.stderr


def test_models_digest_prints_a_files_sha256_and_a_directorys_manifest_digest(tmp_path: Path) -> None:
    model = tmp_path / "model"
    (model / "sub").mkdir(parents=True)
    (model / "config.json").write_bytes(b"{}")
    (model / "sub" / "w.bin").write_bytes(b"\x00" * 1000)
    expected = manifest_digest([
        ("config.json", 2, hashlib.sha256(b"{}").hexdigest()),
        ("sub/w.bin", 1000, hashlib.sha256(b"\x00" * 1000).hexdigest()),
    ])
    assert _gitops("models", "digest", str(model), cwd=tmp_path).stdout == expected + "\n"
    assert _gitops("models", "digest", model.as_uri(), cwd=tmp_path).stdout == expected + "\n"
    single = _gitops("models", "digest", str(model / "config.json"), cwd=tmp_path)
    assert single.stdout == hashlib.sha256(b"{}").hexdigest() + "\n"
    missing = _gitops("models", "digest", str(tmp_path / "nope"), cwd=tmp_path)
    assert missing.returncode == 1 and "no such file or directory" in missing.stderr and "Traceback" not in missing.stderr


def test_models_digest_reads_s3_and_http_sources_as_a_node_does(tmp_path: Path) -> None:
    import http.server
    import threading

    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://{host}:{port}"}
    (tmp_path / "model" / "sub").mkdir(parents=True)
    (tmp_path / "model" / "a.json").write_bytes(b"{}")
    (tmp_path / "model" / "sub" / "w.bin").write_bytes(b"\x01" * 5000)
    served = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path / "model"))
    )
    threading.Thread(target=served.serve_forever, daemon=True).start()
    try:
        s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1",
                          aws_access_key_id="k", aws_secret_access_key="s")
        s3.create_bucket(Bucket="models")
        s3.put_object(Bucket="models", Key="m/a.json", Body=b"{}")
        s3.put_object(Bucket="models", Key="m/sub/w.bin", Body=b"\x01" * 5000)

        def digest(url: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "gitops", "models", "digest", url], check=False,
                                  capture_output=True, text=True, timeout=120, env={**os.environ, **env})

        local = _gitops("models", "digest", str(tmp_path / "model"), cwd=tmp_path).stdout
        assert digest("s3://models/m/").stdout == local
        assert digest("s3://models/m/sub/w.bin").stdout == hashlib.sha256(b"\x01" * 5000).hexdigest() + "\n"
        url = f"http://127.0.0.1:{served.server_address[1]}/sub/w.bin"
        assert digest(url).stdout == hashlib.sha256(b"\x01" * 5000).hexdigest() + "\n"
        missing = digest("s3://models/nope.bin")
        assert missing.returncode == 1 and "cannot read it" in missing.stderr and "Traceback" not in missing.stderr
        refused = digest("http://example.com/m.bin")
        assert refused.returncode == 1 and "loopback" in refused.stderr
    finally:
        served.shutdown()
        served.server_close()
        server.stop()


def test_plan_between_commits_shows_a_new_digest_under_the_backend_it_restarts(repo: GitRepo) -> None:
    repo.write("apps/__init__.py", "")
    repo.write("apps/s.py", APP)
    repo.write("deployments/s.toml", SPEC.format(digest="9f86d081" + "0" * 56))
    first = repo.commit("a model")
    repo.write("deployments/s.toml", SPEC.format(digest="1b4e28ba" + "1" * 56))
    second = repo.commit("new weights")
    result = _gitops("plan", "--repo", str(repo.root), "--from", first, "--to", second, cwd=repo.root)
    assert result.returncode == 0, result.stderr
    lines = [line.strip() for line in result.stdout.splitlines()]
    at = lines.index("~ backend s (restart)")
    assert "~ model sentiment sha256 9f86… → 1b4e…" in lines[at:]
    assert "~ backend plain" not in result.stdout


def test_model_cache_size_takes_units_and_refuses_nonsense() -> None:
    from gitops.cli import build_parser

    parse = build_parser().parse_args
    assert parse(["run", "--model-cache-size", "50GB"]).model_cache_size == 50 * 10**9
    assert parse(["run", "--model-cache-size", "800MiB"]).model_cache_size == 800 * 2**20
    assert parse(["run", "--model-cache-size", "1024"]).model_cache_size == 1024
    assert parse(["run"]).model_cache_size is None
    with pytest.raises(SystemExit):
        parse(["run", "--model-cache-size", "lots"])
