"""SSH signing keys made by a test, and the allowed-signers file that trusts them.

Shared by the commit-verification tests (tests/security/test_signatures.py)
and the signed-automation tests: `make_key` writes an ed25519 key without a
passphrase (`KEY` and `KEY.pub`, mode 600 as ssh-keygen writes it),
`allowed_signers` writes git's allowed-signers file naming each key's public
half under `NAME@example.invalid`.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["allowed_signers", "make_key"]


def make_key(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)], check=True)
    return path


def allowed_signers(path: Path, *keys: Path) -> Path:
    lines = [f"{key.name}@example.invalid {key.with_suffix('.pub').read_text().strip()}" for key in keys]
    path.write_text("\n".join(lines) + "\n")
    return path
