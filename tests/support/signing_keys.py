"""SSH signing keys made by a test, and the allowed-signers file that trusts them.

Shared by the commit-verification tests (tests/security/test_signatures.py)
and the signed-automation tests: `make_key` writes an ed25519 key without a
passphrase (`KEY` and `KEY.pub`, mode 600 as ssh-keygen writes it),
`allowed_signers` writes git's allowed-signers file naming each key's public
half under `NAME@example.invalid`, `signed_commit` commits a test repository's
changes signed with a key (`git commit -S`, `gpg.format=ssh`).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.conftest import GitRepo

__all__ = ["allowed_signers", "make_key", "signed_commit"]


def make_key(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)], check=True)
    return path


def allowed_signers(path: Path, *keys: Path) -> Path:
    lines = [f"{key.name}@example.invalid {key.with_suffix('.pub').read_text().strip()}" for key in keys]
    path.write_text("\n".join(lines) + "\n")
    return path


def signed_commit(repo: GitRepo, key: Path, message: str) -> str:
    repo.git("add", "-A")
    repo.git("-c", "gpg.format=ssh", "-c", f"user.signingkey={key}", "commit", "-q", "--allow-empty", "-S", "-m", message)
    return repo.head()
