"""A replica's secrets: its own age key, the values it was sent, their files.

Owns the replica's end of secret delivery (docs/guides/secrets.md). At start the
replica makes an X25519 age identity that never leaves its memory and tells
its public key (`recipient`, not a secret) to the controller, which seals the
backend's values to it (`controller.state.secrets`); `open` takes that sealed
bundle, so Ray carries only ciphertext that this process alone can read.
Values stay in memory (`value`); `path` writes one to a 0600 file in a 0700
directory on a tmpfs (/dev/shm when there is one), rewritten in place when
new values arrive, and `close` removes the directory when the replica stops
(a directory left by a replica killed outright is removed by the next
replica that makes one on the node). User code reads them through
`ray_gitops.serving.secret` and `secret_path`.

Owns too the replica's redaction (`redact`): every value held, in each
form it may take in text (`vocabulary.replicas.secret_forms`), is masked in what
the replica sends or writes about its user code (the latest exception, the
tracebacks the proxy and stderr get, `gitops logs`); and, once it holds a
value, this process writes no core dump and is not dumpable
(`hardening.core_dumps.no_core_dumps`).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
import traceback
from pathlib import Path

import pyrage

from datalink.private_dirs import process_alive
from hardening.core_dumps import no_core_dumps
from vocabulary.replicas.secret_forms import longest_first, mask, secret_forms

__all__ = ["SecretBox", "SecretMissing"]

_DIR_PREFIX = "gitops-secrets-"
_TMPFS = "/dev/shm"


class SecretMissing(LookupError):
    """User code asked for a secret its backend does not list."""


class SecretBox:
    def __init__(self, backend: str) -> None:
        self._backend = backend
        self._identity = pyrage.x25519.Identity.generate()
        self._values: dict[str, bytes] = {}
        self._forms: tuple[str, ...] = ()  # every value's forms in text, longest first
        self._serial = -1  # of the values held: older ones arriving late are ignored
        self._dir: Path | None = None

    def recipient(self) -> str:
        """This replica's age public key: what the controller seals to."""
        return str(self._identity.to_public())

    def open(self, sealed: bytes) -> bool:
        """Take a bundle sealed to `recipient()` ({"serial", "values"}): every
        value, replacing the ones held, unless it is older than those; whether it was taken."""
        bundle = json.loads(pyrage.decrypt(sealed, [self._identity]))
        if bundle["serial"] < self._serial:
            return False
        self._serial = bundle["serial"]
        self._values = {name: base64.b64decode(text) for name, text in bundle["values"].items()}
        if self._values:
            no_core_dumps()
        # The old values' forms stay masked too: a rotated value is still a secret.
        self._forms = longest_first({*self._forms, *(form for v in self._values.values() for form in secret_forms(v))})
        if self._dir is not None:
            for entry in self._dir.iterdir():
                if entry.name not in self._values:
                    entry.unlink()
            for name in self._values:
                self._write(name)
        return True

    def redact(self, text: str) -> str:
        """`text` with every value this replica was sent (in any of its forms) masked."""
        return mask(text, self._forms) if self._forms else text

    def hiding(self, error: BaseException) -> Exception | None:
        """An exception to raise instead of `error` when its text holds a value
        (its message and traceback masked), else None: `error` may go as it is."""
        if not self._forms:
            return None
        text = "".join(traceback.format_exception(error))
        masked = self.redact(text)
        if masked == text:
            return None
        return RuntimeError(f"{type(error).__name__}: {self.redact(str(error))} (a secret value masked)\n{masked}")

    def names(self) -> list[str]:
        return sorted(self._values)

    def value(self, name: str) -> bytes:
        if name not in self._values:
            raise SecretMissing(self._missing(name))
        return self._values[name]

    def path(self, name: str) -> str:
        """A 0600 file holding the value, in this replica's private directory."""
        self.value(name)
        if self._dir is None:
            self._dir = _private_dir()
        target = self._dir / name
        if not target.exists():
            self._write(name)
        return str(target)

    def close(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def _write(self, name: str) -> None:
        assert self._dir is not None
        temporary = self._dir / f".{name}.new"
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as file:
            file.write(self._values[name])
        os.replace(temporary, self._dir / name)  # readers see the old value or the new, never half

    def _missing(self, name: str) -> str:
        listed = ", ".join(self.names()) or "none"
        return f"backend {self._backend} has no secret '{name}' (it lists: {listed}); add it to the backend's secrets"


def _private_dir() -> Path:
    base = _TMPFS if os.path.isdir(_TMPFS) and os.access(_TMPFS, os.W_OK) else tempfile.gettempdir()
    _sweep(Path(base))
    return Path(tempfile.mkdtemp(prefix=f"{_DIR_PREFIX}{os.getpid()}-", dir=base))  # mkdtemp: 0700


def _sweep(base: Path) -> None:
    """Remove directories of replicas that are gone (killed without stopping)."""
    for entry in base.glob(f"{_DIR_PREFIX}*"):
        try:
            pid = int(entry.name[len(_DIR_PREFIX):].split("-", 1)[0])
            if entry.stat().st_uid == os.getuid() and not process_alive(pid):
                shutil.rmtree(entry, ignore_errors=True)
        except (ValueError, OSError):
            continue
