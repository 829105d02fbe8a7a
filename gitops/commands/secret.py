"""`gitops secret keygen [--output FILE]`, `gitops secret encrypt [IN] --recipients FILE > OUT`
and `gitops secret edit FILE`.

Authoring help for secrets in git (docs/guides/secrets.md), with the `pyrage`
library (age in Rust), no age binary. `keygen` writes a new X25519 identity in
age-keygen's file format to a new 0600 file (never over an existing one) and
prints its recipient; the secret key reaches stdout only with `--output -`.
Recipients are age public keys, one a
line (`#` comments allowed), read from `--recipients` or `.gitops-recipients`
at the repository root. `edit` decrypts FILE (when it exists) with
`--age-identity` into a 0600 file in a private directory on a tmpfs, runs
$EDITOR on it, encrypts the result to the recipients in place and removes
the plaintext; the value is never printed.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyrage

from gitops.errors import UserError
from gitops.loop.secrets import load_identities
from gitops.sources.trees import find_toplevel

__all__ = ["secret_command", "read_recipients", "default_identity_path", "identity_text"]

RECIPIENTS_FILE = ".gitops-recipients"


def secret_command(args: argparse.Namespace) -> int:
    if args.secret_verb == "keygen":
        return _keygen(args.output)
    if args.secret_verb == "encrypt":
        data = Path(args.input).read_bytes() if args.input else sys.stdin.buffer.read()
        sys.stdout.buffer.write(pyrage.encrypt(data, read_recipients(args.recipients, Path.cwd())))
        return 0
    return _edit(Path(args.file), args)


def read_recipients(path: str | None, near: Path) -> list[object]:
    """The age recipients of `path`, else of .gitops-recipients at the repository root."""
    if path is None:
        root = find_toplevel(near) or near
        file = root / RECIPIENTS_FILE
        if not file.exists():
            raise UserError(f"no --recipients given and no {RECIPIENTS_FILE} at {root}")
    else:
        file = Path(path)
    try:
        lines = file.read_text().splitlines()
    except OSError as error:
        raise UserError(f"--recipients {file}: cannot read it ({error.strerror})") from None
    recipients: list[object] = []
    for number, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            recipients.append(pyrage.x25519.Recipient.from_str(text))
        except pyrage.RecipientError:
            raise UserError(f"{file}:{number}:1: not an age public key (age1...)") from None
    if not recipients:
        raise UserError(f"{file}: lists no recipient")
    return recipients


def _edit(target: Path, args: argparse.Namespace) -> int:
    recipients = read_recipients(args.recipients, target.parent.resolve())
    plain = b""
    if target.exists():
        identities = load_identities(args.age_identity)
        if not identities:
            raise UserError(f"{target} exists: pass --age-identity to open it")
        try:
            plain = pyrage.decrypt(target.read_bytes(), identities)
        except pyrage.DecryptError:
            raise UserError(f"{target}: no --age-identity given opens it, or it is corrupt") from None
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    folder = tempfile.mkdtemp(prefix="gitops-secret-edit-", dir=base)  # 0700
    try:
        scratch = Path(folder) / target.name.removesuffix(".age")
        descriptor = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as file:
            file.write(plain)
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        if subprocess.call([*shlex.split(editor), str(scratch)]) != 0:
            raise UserError(f"the editor ({editor}) failed; {target} is unchanged")
        target.write_bytes(pyrage.encrypt(scratch.read_bytes(), recipients))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


def default_identity_path(env: dict[str, str] | os._Environ[str] = os.environ) -> Path:
    """Where `keygen` writes without --output: $XDG_CONFIG_HOME/gitops, else ~/.config/gitops."""
    config = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "gitops" / "age-identity.txt"


def identity_text(identity: pyrage.x25519.Identity, now: datetime.datetime) -> str:
    """An identity file as age-keygen writes it: two comment lines, then the key."""
    created = now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"# created: {created}\n# public key: {identity.to_public()}\n{identity}\n"


def _keygen(output: str | None) -> int:
    identity = pyrage.x25519.Identity.generate()
    text = identity_text(identity, datetime.datetime.now(datetime.UTC))
    if output == "-":
        sys.stdout.write(text)
        print(f"public key: {identity.to_public()}", file=sys.stderr)
        return 0
    path = Path(output) if output is not None else default_identity_path()
    if output is None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        raise UserError(f"{path} exists: not overwritten (remove it first, or choose another --output)") from None
    except OSError as error:
        raise UserError(f"--output {path}: cannot create it ({error.strerror})") from None
    with os.fdopen(descriptor, "w") as file:
        os.fchmod(file.fileno(), 0o600)  # whatever the umask
        file.write(text)
    print(identity.to_public())
    print(f"wrote the identity to {path} (mode 0600); its recipient is above: add it to {RECIPIENTS_FILE}",
          file=sys.stderr)
    return 0
