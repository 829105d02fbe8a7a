"""The agent's state dir: its layout, and that it stays private and out of git.

`gitops run --state-dir` (default `.gitops-state/`, often inside the watched
repository) holds the history ledger, the clone cache of a remote
repository, the code exports, the suspend marker, the quarantine, the
webhook deliveries already accepted (replays refused across restarts) and the
admin address for client commands (`gitops.admin.address`). `prepare` creates it
readable by its owner only (0700) with a `.gitignore` of `*`, so `git
status` never shows it and `git add -A` never commits it, and creates the
history database 0600 before SQLite opens it (SQLite gives its journal
files the database's mode). Owns too: `private_file` (0600, for the
suspend marker, the history's WAL/SHM left by older agents) and the lock
one `gitops run` holds on the dir for its lifetime (`flock` on
`<state dir>/lock`), so a second agent on the same state dir stops at
start with one line; and the agent's id (`agent_id`), made once and kept
there, so a restarted agent is known as the owner it was. Must not: read or write what the files hold;
`gitops.loop.history`, `gitops.sources.repos` and `gitops.loop.agent` do that.
"""

from __future__ import annotations

import fcntl
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from gitops.errors import UserError

__all__ = ["AGENT_ID_FILE", "GITIGNORE", "LOCK_FILE", "agent_id", "StateDir", "lock", "prepare", "private_file"]

LOCK_FILE = "lock"
AGENT_ID_FILE = "agent_id"
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

    @property
    def quarantine(self) -> Path:
        return self.root / "quarantine.json"

    @property
    def webhook_deliveries(self) -> Path:
        return self.root / "webhook-deliveries"


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


def private_file(path: Path) -> Path:
    """`path`, created empty if missing, readable and writable by its owner only (0600)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    path.chmod(0o600)
    return path


def lock(root: Path) -> IO[str]:
    """Hold the state dir for this process; the lock goes with the returned file.

    Raises `UserError` naming the holder's pid when another process holds it.
    """
    handle = private_file(root / LOCK_FILE).open("r+", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = handle.read().strip() or "another process"
        handle.close()
        raise UserError(
            f"state dir {root} is in use by gitops run (pid {holder}); give each agent its own --state-dir"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def agent_id(root: Path) -> str:
    """This state dir's agent id, made on first use and kept (0600)."""
    path = private_file(root / AGENT_ID_FILE)
    known = path.read_text(encoding="utf-8").strip()
    if known:
        return known
    made = uuid.uuid4().hex[:12]
    path.write_text(made + "\n", encoding="utf-8")
    return made
