"""The SSH key the agent signs the commits it writes with (`--signing-key FILE`).

Owns `gitops run --signing-key` and `gitops automation run --signing-key`:
checking the key file once at start (`load_signing_key`: it exists, is a
file this process can read, no one else can read it — ssh-keygen refuses a
key group or others can read — and ssh-keygen accepts it as a private key
without a passphrase, `ssh-keygen -y`, since the agent signs unattended),
the git options that make `git commit-tree -S` sign with it (`git_options`:
`gpg.format=ssh`, `user.signingKey`, given per call with `-c`, no config file
written) and whether an allowed-signers file lists its public key
(`allowed_by`), so an agent that also verifies commits can say at start that
its own commits would be refused.

Neither the key's path nor its content is ever shown: the errors name the
flag alone, and `load_signing_key` registers the path for redaction
(`gitops.redaction`), since git and ssh-keygen name the file in their own
messages (a signing failure's error result). Must not: run git (that is
`gitops.sources.repos.GitSource.commit_file`), or decide what an unsigned
commit means.
"""

from __future__ import annotations

import os
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from gitops.errors import UsageError
from gitops.redaction import register_secret

__all__ = ["SigningKey", "allowed_by", "load_signing_key"]

_KEYGEN_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class SigningKey:
    """A checked private key file and its public key (`TYPE BASE64`, without a comment)."""

    path: Path
    public_key: str

    def git_options(self) -> list[str]:
        """The `git -c` options with which `commit-tree -S` signs with this key."""
        return ["-c", "gpg.format=ssh", "-c", f"user.signingKey={self.path}", "-c", "gpg.ssh.program=ssh-keygen"]


def load_signing_key(given: str, flag: str) -> SigningKey:
    """The key file `given` as `flag`, checked; a `UsageError` naming the flag (not the file) when
    it cannot sign. From now on the file's path is masked wherever this process would show it."""
    path = Path(given).expanduser().absolute()
    register_secret(str(path))
    if given != str(path):
        register_secret(given)  # as typed, too (shorter than 4 characters is never masked)
    try:
        status = path.stat()
    except OSError as error:
        raise UsageError(f"{flag}: cannot read the key file ({error.strerror})") from None
    if not stat.S_ISREG(status.st_mode):
        raise UsageError(f"{flag}: the key is not a regular file")
    if not os.access(path, os.R_OK):
        raise UsageError(f"{flag}: cannot read the key file (permission denied)")
    if status.st_mode & 0o077:
        raise UsageError(
            f"{flag}: the key file can be read by others (mode {stat.S_IMODE(status.st_mode):04o}); "
            "chmod 600 it (ssh-keygen refuses such a key)"
        )
    return SigningKey(path, _public_key(path, flag))


def _public_key(path: Path, flag: str) -> str:
    """`ssh-keygen -y`: the key's public half, or why ssh-keygen cannot read it (without the path)."""
    try:
        done = subprocess.run(
            # -P '': a key with a passphrase fails here instead of prompting; the agent signs unattended.
            ["ssh-keygen", "-y", "-P", "", "-f", str(path)],
            capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=_KEYGEN_TIMEOUT_S, check=False,
        )
    except FileNotFoundError:
        raise UsageError(f"{flag}: ssh-keygen is not installed (git signs with it)") from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"{flag}: ssh-keygen -y did not answer in {_KEYGEN_TIMEOUT_S:.0f} s") from None
    fields = done.stdout.split()
    if done.returncode != 0 or len(fields) < 2:
        reason = _keygen_reason(done.stderr, path)
        if "passphrase" in reason:
            raise UsageError(f"{flag}: the key has a passphrase; the agent signs unattended, give a key without one")
        raise UsageError(f"{flag}: not an SSH private key ssh-keygen can read ({reason})")
    return f"{fields[0]} {fields[1]}"


def _keygen_reason(stderr: str, path: Path) -> str:
    """ssh-keygen's last line, without the file's path (`Load key "PATH": invalid format`)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    if not lines:
        return "no public key"
    last = lines[-1].replace(str(path), "the file")
    return last.rsplit('": ', 1)[-1] if '": ' in last else last


def allowed_by(key: SigningKey, allowed_signers: Path) -> bool:
    """True when a line of the allowed-signers file (git's format: principals, options, key) holds
    this key; False when none does or the file cannot be read."""
    try:
        text = allowed_signers.read_text(errors="replace")
    except OSError:
        return False
    key_type, blob = key.public_key.split()
    for line in text.splitlines():
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        for index in range(len(fields) - 1):
            if fields[index] == key_type and fields[index + 1] == blob:
                return True
    return False
