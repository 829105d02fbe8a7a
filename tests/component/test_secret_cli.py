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
        (tmp_path / "empty.txt", "holds no AGE-SECRET-KEY line (make one with `gitops secret keygen`)"),
    ]:
        done = gitops("run", "--admin-port", "0", "--age-identity", str(path), cwd=root)
        assert (done.returncode, done.stdout) == (1, b"")
        assert done.stderr.decode() == f"gitops run: --age-identity {path}: {why}\n"


def test_keygen_writes_a_0600_identity_prints_its_recipient_and_never_the_key(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    made = gitops("secret", "keygen", "--output", str(tmp_path / "agent.txt"), cwd=root)
    assert made.returncode == 0, made.stderr
    key_file = tmp_path / "agent.txt"
    assert key_file.stat().st_mode & 0o777 == 0o600
    text = key_file.read_text()
    secret_line = next(line for line in text.splitlines() if line.startswith("AGE-SECRET-KEY-1"))
    identity = pyrage.x25519.Identity.from_str(secret_line)
    recipient = made.stdout.decode().strip()
    assert recipient == str(identity.to_public()) and f"# public key: {recipient}" in text
    assert secret_line.encode() not in made.stdout + made.stderr
    # The recipient goes into .gitops-recipients; what is encrypted to it opens with the file.
    (root / ".gitops-recipients").write_text(f"{recipient}\n")
    (tmp_path / "plain.txt").write_bytes(b"hunter2")
    encrypted = gitops("secret", "encrypt", str(tmp_path / "plain.txt"), cwd=root)
    assert encrypted.returncode == 0, encrypted.stderr
    assert pyrage.decrypt(encrypted.stdout, [identity]) == b"hunter2"
    # An existing file is never overwritten.
    again = gitops("secret", "keygen", "--output", str(key_file), cwd=root)
    assert again.returncode == 1 and key_file.read_text() == text
    assert again.stderr.decode().strip() == (
        f"gitops secret: {key_file} exists: not overwritten (remove it first, or choose another --output)"
    )


def test_keygen_writes_to_the_config_dir_by_default_and_to_stdout_only_when_asked(tmp_path: Path) -> None:
    config = tmp_path / "config"
    made = gitops("secret", "keygen", cwd=tmp_path, env={"XDG_CONFIG_HOME": str(config)})
    assert made.returncode == 0, made.stderr
    key_file = config / "gitops" / "age-identity.txt"
    assert key_file.stat().st_mode & 0o777 == 0o600 and key_file.parent.stat().st_mode & 0o777 == 0o700
    assert b"AGE-SECRET-KEY-" not in made.stdout + made.stderr
    assert made.stdout.decode().strip().startswith("age1")
    printed = gitops("secret", "keygen", "--output", "-", cwd=tmp_path)
    assert printed.returncode == 0, printed.stderr
    identity = pyrage.x25519.Identity.from_str(printed.stdout.decode().splitlines()[-1])
    assert printed.stderr.decode().strip() == f"public key: {identity.to_public()}"
