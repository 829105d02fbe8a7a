"""`gitops secret encrypt|edit` and `gitops validate [--age-identity]` as a user runs them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyrage
import pytest

APP = "class Vault:\n    def __call__(self, request):\n        return 'ok'\n"
SPEC = '[secrets.db]\nfile = "secrets/db.age"\n\n[backends.vault]\nimport_path = "apps.vault:Vault"\nsecrets = ["db"]\n'


def gitops(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "gitops", *args], cwd=cwd, capture_output=True, timeout=60,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, object]:
    identity = pyrage.x25519.Identity.generate()
    path = tmp_path / "me.txt"
    path.write_text(f"# created: by the test\n{identity}\n")
    path.chmod(0o600)
    return path, identity


def _repository(root: Path, recipient: object) -> None:
    (root / "apps").mkdir(parents=True)
    (root / "apps" / "__init__.py").write_text("")
    (root / "apps" / "vault.py").write_text(APP)
    (root / "deployments").mkdir()
    (root / "deployments" / "vault.toml").write_text(SPEC)
    (root / ".gitops-recipients").write_text(f"# the agent\n{recipient}\n")
    (root / "secrets").mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)


def test_encrypt_to_the_repository_recipients_then_validate_with_and_without_the_identity(
    tmp_path: Path, keys: tuple[Path, object]
) -> None:
    identity_file, identity = keys
    root = tmp_path / "repo"
    _repository(root, identity.to_public())
    (tmp_path / "plain.txt").write_bytes(b"hunter2")
    encrypted = gitops("secret", "encrypt", str(tmp_path / "plain.txt"), cwd=root)
    assert encrypted.returncode == 0, encrypted.stderr
    assert pyrage.decrypt(encrypted.stdout, [identity]) == b"hunter2"
    (root / "secrets" / "db.age").write_bytes(encrypted.stdout)
    assert gitops("validate", "deployments", cwd=root).returncode == 0
    checked = gitops("validate", "deployments", "--age-identity", str(identity_file), cwd=root)
    assert checked.returncode == 0, checked.stderr
    # Encrypted to someone else: fine without a key, refused when decrypting, the value never printed.
    stranger = pyrage.x25519.Identity.generate().to_public()
    (root / "secrets" / "db.age").write_bytes(pyrage.encrypt(b"hunter2", [stranger]))
    assert gitops("validate", "deployments", cwd=root).returncode == 0
    refused = gitops("validate", "deployments", "--age-identity", str(identity_file), cwd=root)
    assert refused.returncode == 1
    assert refused.stderr.decode().splitlines()[0] == (
        "secrets/db.age:1:1: secret 'db' (secrets/db.age) does not decrypt: "
        "no --age-identity given opens it, or it is corrupt"
    )
    # A plaintext file committed by mistake is refused without being quoted.
    (root / "secrets" / "db.age").write_bytes(b"hunter2")
    plain = gitops("validate", "deployments", cwd=root)
    assert plain.returncode == 1 and b"hunter2" not in plain.stderr + plain.stdout
    assert b"deployments/vault.toml:2:1: secrets.db.file: 'secrets/db.age' is not an age-encrypted file" in plain.stderr


def test_an_identity_others_can_read_is_refused(tmp_path: Path, keys: tuple[Path, object]) -> None:
    identity_file, identity = keys
    root = tmp_path / "repo"
    _repository(root, identity.to_public())
    (root / "secrets" / "db.age").write_bytes(pyrage.encrypt(b"x", [identity.to_public()]))
    identity_file.chmod(0o644)
    done = gitops("validate", "deployments", "--age-identity", str(identity_file), cwd=root)
    assert done.returncode == 1
    assert done.stderr.decode() == (
        f"gitops validate: --age-identity {identity_file}: others can read it (mode 0644); chmod 600 it\n"
    )


def test_edit_decrypts_into_the_editor_and_encrypts_the_result_in_place(
    tmp_path: Path, keys: tuple[Path, object]
) -> None:
    identity_file, identity = keys
    root = tmp_path / "repo"
    _repository(root, identity.to_public())
    target = root / "secrets" / "db.age"
    editor = {"EDITOR": "sh -c 'test \"$(cat \"$1\")\" = old && test \"$(stat -c %a \"$1\")\" = 600 && printf new > \"$1\"' sh"}
    created = gitops("secret", "edit", str(target), cwd=root, env={"EDITOR": "sh -c 'printf old > \"$1\"' sh"})
    assert created.returncode == 0, created.stderr
    assert pyrage.decrypt(target.read_bytes(), [identity]) == b"old"
    edited = gitops("secret", "edit", str(target), "--age-identity", str(identity_file), cwd=root, env=editor)
    assert edited.returncode == 0, edited.stderr
    assert pyrage.decrypt(target.read_bytes(), [identity]) == b"new"
    assert b"old" not in edited.stdout + edited.stderr and b"new" not in edited.stdout + edited.stderr
    assert not list(Path("/dev/shm").glob("gitops-secret-edit-*"))
    without = gitops("secret", "edit", str(target), cwd=root)
    assert (without.returncode, without.stderr.decode()) == (
        1, f"gitops secret: {target} exists: pass --age-identity to open it\n"
    )


def test_run_stops_before_anything_starts_for_an_identity_it_cannot_use(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    _repository(root, pyrage.x25519.Identity.generate().to_public())
    (tmp_path / "empty.txt").write_text("# no key here\n")
    (tmp_path / "empty.txt").chmod(0o600)
    for path, why in [
        (tmp_path / "missing.txt", "cannot read it (No such file or directory)"),
        (tmp_path / "empty.txt", "holds no AGE-SECRET-KEY line (make one with `age-keygen`)"),
    ]:
        done = gitops("run", "--admin-port", "0", "--age-identity", str(path), cwd=root)
        assert (done.returncode, done.stdout) == (1, b"")
        assert done.stderr.decode() == f"gitops run: --age-identity {path}: {why}\n"
