"""Where client commands find the running agent's admin API.

The agent writes its admin URL (never its token) to `agent_address` in its
state dir when its admin API listens, and removes it when it stops
(`write`, `remove`). A client command (`gitops status`, `wait`, ...) takes,
first to last: `--agent`, `$GITOPS_AGENT`, the address file of the default
state dir (`.gitops-state/`) found in the current directory or a parent of it
up to the filesystem root (the way git finds `.git`), else
`http://127.0.0.1:8001` (`resolve`). A found file is used only when it and its
directory belong to this user and nobody else may write them (the state dir is
0700), so a checkout that carries such a file cannot send a client's token
elsewhere. Must not: talk HTTP (`gitops.commands.remote` does) or read the token.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

__all__ = [
    "ADDRESS_FILE", "AGENT_ADDRESS_HINT", "AGENT_ENV", "DEFAULT_AGENT", "DEFAULT_STATE_DIR",
    "AgentAddress", "resolve", "write", "remove", "connectable_url",
]

DEFAULT_AGENT = "http://127.0.0.1:8001"
DEFAULT_STATE_DIR = ".gitops-state"
ADDRESS_FILE = "agent_address"
AGENT_ENV = "GITOPS_AGENT"
AGENT_ADDRESS_HINT = f"{DEFAULT_STATE_DIR}/{ADDRESS_FILE}"


@dataclass(frozen=True)
class AgentAddress:
    url: str
    source: str  # where the URL came from, for error messages: "--agent", "$GITOPS_AGENT", a file, "the default"


def resolve(flag: str | None, environ: Mapping[str, str], cwd: Path) -> AgentAddress:
    if flag:
        return AgentAddress(flag, "--agent")
    if environ.get(AGENT_ENV, "").strip():
        return AgentAddress(environ[AGENT_ENV].strip(), f"${AGENT_ENV}")
    for directory in (cwd, *cwd.parents):
        path = directory / DEFAULT_STATE_DIR / ADDRESS_FILE
        url = _trusted_address(path)
        if url:
            return AgentAddress(url, str(path))
    return AgentAddress(DEFAULT_AGENT, "the default")


def _trusted_address(path: Path) -> str:
    """The URL in `path`, or "" when it is missing or someone else could have written it."""
    try:
        for item in (path.parent, path):
            info = item.lstat()
            if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or stat.S_ISLNK(info.st_mode):
                return ""
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return ""
    return text if text.startswith(("http://", "https://")) and len(text.splitlines()) == 1 else ""


def connectable_url(host: str, port: int) -> str:
    """The URL a client on this machine dials for a server bound to `host`:`port`
    (a wildcard address is dialled on loopback)."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def write(state_root: Path, url: str) -> Path:
    """Write the admin URL to the state dir (0600), replacing an older one atomically."""
    path = state_root / ADDRESS_FILE
    partial = path.with_name(ADDRESS_FILE + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(url + "\n")
    os.replace(partial, path)
    return path


def remove(state_root: Path) -> None:
    try:
        (state_root / ADDRESS_FILE).unlink()
    except FileNotFoundError:
        pass
