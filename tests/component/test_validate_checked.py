"""`gitops validate` says what it checked (issue 49 row 6) and its errors say
what to type (row 7): did-you-mean for a misspelt key, table or allowed value,
and a wrong value located at the value's column, not at column 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyrage
import pytest

APP = "class Hello:\n    def __call__(self, request):\n        return 'hi'\n"
SPEC = '''\
[secrets.db]
file = "secrets/db.age"

[models.tiny]
source = "file:///models/tiny.bin"
sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

[backends.hello-v1]
import_path = "deployments.hello:Hello"
num_replicas = 1
secrets = ["db"]
models = ["tiny"]

[endpoints.hello]
route = "/hello"
traffic = { hello-v1 = 1.0 }
'''
STAGING = '''\
[backends.hello-v1]
num_replicas = 2

[promotion]
to = "prod"
branch = "env/prod"
soak_s = 60

[[sync_windows]]
kind = "deny"
schedule = "0 22 * * 1-5"
duration_s = 3600
'''


def _gitops(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gitops", *args], cwd=cwd, capture_output=True, text=True, timeout=120,
        env={**os.environ},
    )


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, object]:
    identity = pyrage.x25519.Identity.generate()
    path = tmp_path / "agent.key"
    path.write_text(f"{identity}\n")
    path.chmod(0o600)
    return path, identity


@pytest.fixture
def repository(tmp_path: Path, keys: tuple[Path, object]) -> Path:
    root = tmp_path / "repo"
    (root / "deployments").mkdir(parents=True)
    (root / "deployments" / "__init__.py").write_text("")
    (root / "deployments" / "hello.py").write_text(APP)
    (root / "deployments" / "hello.toml").write_text(SPEC)
    (root / "secrets").mkdir()
    (root / "secrets" / "db.age").write_bytes(pyrage.encrypt(b"hunter2", [keys[1].to_public()]))  # type: ignore[attr-defined]
    (root / "environments").mkdir()
    (root / "environments" / "staging.toml").write_text(STAGING)
    (root / "environments" / "prod.toml").write_text("")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def test_without_a_key_validate_says_the_secrets_were_not_decrypted(repository: Path) -> None:
    done = _gitops(repository, "validate")
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout.splitlines() == [
        "Checked:",
        "  specs:        1 file (keys, types, routes, traffic, imports, code paths)",
        "  environments: prod, staging (each on top of the specs)",
        "  secrets:      1 (db), files found but not decrypted (pass --age-identity to check they open)",
        "  models:       1 (tiny), each pinned by sha256 (fetched by the agent)",
        "  automation:   promotion staging -> prod; 1 sync window",
        "deployments: 1 backend, 1 endpoint, valid",
    ]


def test_with_the_key_validate_says_it_decrypted_them(repository: Path, keys: tuple[Path, object]) -> None:
    done = _gitops(repository, "validate", "--age-identity", str(keys[0]))
    assert done.returncode == 0, done.stderr
    assert "  secrets:      1 (db), each decrypted with --age-identity" in done.stdout.splitlines()
    document = json.loads(_gitops(repository, "validate", "--format", "json", "--age-identity", str(keys[0])).stdout)
    assert document["checked"] == {
        "spec_files": 1, "environments": ["prod", "staging"], "secrets": ["db"], "secrets_decrypted": True,
        "models": ["tiny"], "promotions": ["staging -> prod"], "sync_windows": 1,
    }


def test_a_plain_tree_says_there_was_nothing_else_to_check(repository: Path) -> None:
    for path in ("environments/staging.toml", "environments/prod.toml"):
        (repository / path).unlink()
    (repository / "deployments" / "hello.toml").write_text(SPEC.split("[backends.hello-v1]")[1].join(
        ["[backends.hello-v1]", ""]).replace('secrets = ["db"]\nmodels = ["tiny"]\n', ""))
    done = _gitops(repository, "validate")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1:] == [
        "  specs:        1 file (keys, types, routes, traffic, imports, code paths)",
        "  environments: none (no environments/NAME.toml)",
        "  secrets:      none",
        "  models:       none",
        "deployments: 1 backend, 1 endpoint, valid",
    ]


MISTAKES = '''\
[backends.hello-v1]
import_path = "deployments.hello:Hello"
num_replica = 2
max_concurrent_queries = "two"
routing = { policy = "round_robbin" }

[endpoint.hello]
route = "/hello"
'''


def test_errors_say_what_to_type_at_the_column_of_the_value(repository: Path) -> None:
    (repository / "deployments" / "hello.toml").write_text(MISTAKES)
    done = _gitops(repository, "validate", "--environment", "prod")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "deployments/hello.toml:3:1: backends.hello-v1: unknown key 'num_replica' (did you mean 'num_replicas'?)",
        "deployments/hello.toml:4:26: backends.hello-v1.max_concurrent_queries: must be an integer (got 'two')",
        "deployments/hello.toml:5:22: backends.hello-v1.routing.policy: must be 'power_of_two', 'round_robin', "
        "'least_loaded', 'consistent_hash' or 'prefix_affinity' (got 'round_robbin') (did you mean 'round_robin'?)",
        "deployments/hello.toml:7:1: unknown table 'endpoint' (expected [backends.NAME], [endpoints.NAME], "
        "[secrets.NAME] or [models.NAME]) (did you mean 'endpoints'?)",
    ]
    assert done.stdout == "deployments: 4 errors, invalid\n"


def test_an_environment_file_gets_the_same_hints(repository: Path) -> None:
    (repository / "environments" / "prod.toml").write_text(
        '[backends.hello-v1]\nnum_replics = 2\n\n[promotion]\nto = "x"\nbrnch = "y"\nsoak_s = 1\n'
    )
    done = _gitops(repository, "validate", "--environment", "prod")
    assert done.returncode == 1
    assert "(did you mean 'num_replicas'?)" in done.stderr, done.stderr
    assert "environments/prod.toml:6:1: promotion.brnch: unknown key 'brnch' (did you mean 'branch'?)" in done.stderr
