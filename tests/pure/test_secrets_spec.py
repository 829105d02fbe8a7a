"""Secrets in the spec, without a key: tables, references, age file shapes,
literal credentials refused, and how a plan shows a changed secret."""

from __future__ import annotations

from gitops.reconcile.planner import plan
from gitops.specs.documents import combine, parse_file
from gitops.specs.secrets import age_file_problem
from vocabulary.spec.backends import BackendConfig
from vocabulary.spec.state import ServingState

SPEC = b'''[secrets.db]
file = "secrets/db.age"

[backends.orders]
import_path = "apps.orders:Orders"
secrets = ["db", "registry"]
runtime_env = { env_vars = { LOG_LEVEL = "info", DB_PASSWORD = "hunter2", API_KEY = "k", KEYBOARD = "us" } }
'''


def _errors(*files: tuple[str, bytes]) -> list[str]:
    documents = combine({path: parse_file(path, data) for path, data in files})
    return sorted(str(error) for error in documents.errors)


def test_a_backend_names_only_declared_secrets_and_literal_credentials_are_refused_with_locations() -> None:
    errors = _errors(("deployments/orders.toml", SPEC))
    assert errors == [
        "deployments/orders.toml:6:18: backends.orders.secrets[1]: no [secrets.registry] is declared (declared: db)",
        "deployments/orders.toml:7:50: backends.orders.runtime_env.env_vars.DB_PASSWORD: 'DB_PASSWORD' looks "
        "like a credential with its value written in the spec (plain text in git, in Ray and in every plan); "
        "declare it as [secrets.NAME] with an age-encrypted file and list it in the backend's secrets "
        "(docs/guides/secrets.md)",
        "deployments/orders.toml:7:75: backends.orders.runtime_env.env_vars.API_KEY: 'API_KEY' looks like a "
        "credential with its value written in the spec (plain text in git, in Ray and in every plan); declare "
        "it as [secrets.NAME] with an age-encrypted file and list it in the backend's secrets (docs/guides/secrets.md)",
    ]
    assert not any("hunter2" in error for error in errors)


def test_secrets_may_be_declared_in_another_file_but_only_once() -> None:
    backend = b'[backends.orders]\nimport_path = "apps.orders:Orders"\nsecrets = ["db"]\n'
    secret = b'[secrets.db]\nfile = "secrets/db.age"\n'
    assert _errors(("deployments/a.toml", backend), ("deployments/b.toml", secret)) == []
    twice = _errors(("deployments/a.toml", backend + secret), ("deployments/b.toml", secret))
    assert twice == ["deployments/b.toml:1:1: secret 'db' is defined twice: in deployments/a.toml:4:1 and in deployments/b.toml"]


def test_a_secret_table_needs_a_file_inside_the_repository_and_nothing_else() -> None:
    errors = _errors(("d/s.toml", b'[secrets.a]\nfile = "../outside.age"\n[secrets.b]\nvalue = "x"\n'))
    assert errors == [
        "d/s.toml:2:8: secrets.a.file: must be a relative path inside the repository (got '../outside.age')",
        "d/s.toml:3:1: secrets.b: missing required key 'file'",
        "d/s.toml:4:1: secrets.b: unknown key 'value'",
    ]


def test_on_secret_change_is_reconfigure_or_restart() -> None:
    bad = b'[backends.a]\nimport_path = "m:A"\non_secret_change = "reload"\n'
    assert _errors(("d/a.toml", bad)) == [
        "d/a.toml:3:20: backends.a.on_secret_change: must be 'reconfigure' or 'restart' (got 'reload')"
    ]


def test_an_age_file_is_binary_or_armored_and_a_plaintext_file_is_refused_without_quoting_it() -> None:
    assert age_file_problem(100, b"age-encryption.org/v1\n-> X25519 abc") is None
    assert age_file_problem(100, b"-----BEGIN AGE ENCRYPTED FILE-----\nYWdl") is None
    problem = age_file_problem(9, b"hunter2\n")
    assert problem is not None and "not an age-encrypted file" in problem and "hunter2" not in problem
    assert "at most 1024 KiB" in (age_file_problem(2 * 1024 * 1024, b"age-encryption.org/v1\n") or "")


def _state(digests: dict[str, str]) -> ServingState:
    config = BackendConfig(
        name="orders", version="v1", import_path="m:A", secrets=tuple(sorted(digests)), secret_digests=digests
    )
    return ServingState(backends={"orders": config})


def test_a_plan_names_a_changed_secret_and_shows_no_hash() -> None:
    before = _state({"db": "1111aaaa", "old": "3333"})
    after = _state({"db": "2222bbbb", "new": "4444"})
    text = plan(after, before).render_text()
    assert "~ backend orders (in place)" in text
    assert "~ secret db (changed)" in text and "~ secret new (added)" in text and "~ secret old (removed)" in text
    for digest in ("1111aaaa", "2222bbbb", "3333", "4444"):
        assert digest not in text
    assert not plan(before, before)
