"""Named admin tokens: the token file, its lines, finding a bearer's principal.

The file (`gitops run --admin-tokens-file F`) holds one token a line as
`NAME ROLE SHA256 [SCOPE]`: a name (history records it), `viewer`,
`operator` or `admin`, the token's SHA-256 in hex (the file never holds a
token itself: `printf %s "$TOKEN" | sha256sum`), and an optional
`environment=NAME` or `endpoint=NAME` (`gitops.admin.auth.roles.Scope`). `#`
starts a comment. A bad line is an error naming `FILE:LINE`.

`TokenTable.find` hashes the bearer once and compares it with every
entry's digest in constant time, never stopping early, so neither a
token's value nor its position leaks through timing. `TokenFile` reads the
file again when its size, mtime or inode changes (checked at most once a
second); a file that no longer parses keeps the last good table and says
so once in the log. Bounded: 1 MiB, 10,000 tokens. The old single
`--admin-token-file` is `TokenTable.single`, one admin token.
Must not: log or keep a bearer's value; do I/O beyond reading its file.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from gitops.admin.auth.roles import Principal, Role, Scope
from gitops.errors import UserError

__all__ = ["TokenTable", "TokenFile", "parse_tokens", "MAX_FILE_BYTES", "MAX_TOKENS"]

MAX_FILE_BYTES = 1 << 20
MAX_TOKENS = 10_000
_CHECK_EVERY_S = 1.0
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:+-]{0,127}")
_DIGEST = re.compile(r"[0-9a-fA-F]{64}")
_LOG = logging.getLogger("gitops.admin")


@dataclass(frozen=True)
class _Entry:
    digest: bytes
    principal: Principal


class TokenTable:
    """The tokens one file (or the old flag) names."""

    def __init__(self, entries: tuple[_Entry, ...]) -> None:
        self._entries = entries

    @classmethod
    def single(cls, token: bytes, name: str) -> TokenTable:
        """The old `--admin-token-file`: one token, admin, named `name`."""
        return cls((_Entry(hashlib.sha256(token).digest(), Principal(name, Role.ADMIN)),))

    def __len__(self) -> int:
        return len(self._entries)

    def find(self, token: str) -> Principal | None:
        """The principal whose digest is the bearer's, compared with every entry in constant time."""
        given = hashlib.sha256(token.encode()).digest()
        found: Principal | None = None
        for entry in self._entries:
            if hmac.compare_digest(entry.digest, given) and found is None:
                found = entry.principal
        return found


def parse_tokens(text: str, source: str) -> TokenTable:
    """The table a token file's text holds; `UserError` naming `source:LINE` for a bad line."""
    entries: list[_Entry] = []
    names: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{source}:{number}"
        fields = line.split()
        if len(fields) not in (3, 4):
            raise UserError(f"{where}: expected NAME ROLE SHA256 [environment=NAME|endpoint=NAME], "
                            f"got {len(fields)} fields")
        name, role_text, digest = fields[:3]
        if not _NAME.fullmatch(name):
            raise UserError(f"{where}: token name {name[:40]!r} must be letters, digits and . _ @ : + - "
                            "(at most 128)")
        if name in names:
            raise UserError(f"{where}: token name {name!r} already on line {names[name]}")
        if not _DIGEST.fullmatch(digest):
            raise UserError(f"{where}: the third field must be the token's SHA-256 in hex (64 digits), "
                            "never the token itself")
        try:
            role = Role.parse(role_text)
            scope = Scope.parse(fields[3]) if len(fields) == 4 else None
        except ValueError as error:
            raise UserError(f"{where}: {error}") from None
        names[name] = number
        entries.append(_Entry(bytes.fromhex(digest), Principal(name, role, scope)))
        if len(entries) > MAX_TOKENS:
            raise UserError(f"{where}: more than {MAX_TOKENS} tokens")
    return TokenTable(tuple(entries))


def read_tokens(path: Path) -> TokenTable:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise UserError(f"{path}:1: the token file is larger than {MAX_FILE_BYTES} bytes")
        text = path.read_bytes()[:MAX_FILE_BYTES].decode("utf-8")
    except OSError as error:
        raise UserError(f"--admin-tokens-file {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}:1: the token file is not UTF-8 text") from None
    return parse_tokens(text, str(path))


class TokenFile:
    """A token file, read again when it changes; the last good table while it does not parse."""

    def __init__(self, path: str | Path, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = Path(path)
        self._clock = clock
        self._lock = threading.Lock()
        self._stamp = self._stat()
        self._table = read_tokens(self.path)  # a bad file at start stops `gitops run`
        self._checked = clock()
        self._complained: tuple[int, int, int] | None = None

    def table(self) -> TokenTable:
        now = self._clock()
        if now - self._checked < _CHECK_EVERY_S:
            return self._table
        with self._lock:
            self._checked = now
            stamp = self._stat()
            if stamp != self._stamp and stamp is not None:
                try:
                    self._table = read_tokens(self.path)
                    self._stamp = stamp
                    _LOG.info("gitops: %s read again: %d tokens", self.path, len(self._table))
                except UserError as error:
                    if self._complained != stamp:
                        self._complained = stamp
                        _LOG.error("gitops: %s; keeping the %d tokens read before", error, len(self._table))
        return self._table

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)
