"""The agent's state dir: its layout, and that it stays private and out of git.

`gitops run --state-dir` (default `.gitops-state/`, often inside the watched
repository) holds the history ledger, the clone cache of a remote
repository, the code exports and the suspend marker. `prepare` creates it
readable by its owner only (0700) with a `.gitignore` of `*`, so `git
status` never shows it and `git add -A` never commits it, and creates the
history database 0600 before SQLite opens it (SQLite gives its journal
files the database's mode). Must not: read or write what the files hold;
`gitops.history`, `gitops.sources.repos` and `gitops.agent` do that.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gitops.errors import UserError

__all__ = ["GITIGNORE", "StateDir", "prepare"]

GITIGNORE = "# Written by `gitops run`: nothing in the agent's state dir belongs in git.\n*\n"


@dataclass(frozen=True)
class StateDir:
    """Where each piece of the agent's state lives under `root`."""

    root: Path

    @property
    def history(self) -> Path:
        return self.root / "history.db"

    @property
    def suspend_marker(self) -> Path:
        return self.root / "suspended"


def prepare(root: Path) -> StateDir:
    """Create (or tighten) the state dir: 0700, ignored by git, history 0600.

    The paths it hands out are absolute: code exports under it become
    replicas' working_dir, which the controller resolves in its own process,
    in another directory or on another machine's view of this one.
    """
    root = root.absolute()
    state = StateDir(root)
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        root.chmod(0o700)
        ignore = root / ".gitignore"
        if not ignore.exists():
            ignore.write_text(GITIGNORE)
        os.close(os.open(state.history, os.O_CREAT | os.O_WRONLY, 0o600))
        state.history.chmod(0o600)
    except OSError as error:
        raise UserError(f"--state-dir {root}: {error.strerror}") from None
    return state
