"""The TCP ports processes listen on, from /proc, for the tests of who takes which port."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["listening_ports", "command_line"]

_LISTEN = "0A"


def _listening_by_inode() -> dict[str, int]:
    ports: dict[str, int] = {}
    for table in ("tcp", "tcp6"):
        try:
            lines = (Path("/proc/net") / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) >= 10 and fields[3] == _LISTEN:
                ports[fields[9]] = int(fields[1].rsplit(":", 1)[1], 16)
    return ports


def listening_ports(pids: set[int]) -> dict[int, set[int]]:
    """The TCP ports each of `pids` listens on (gone or unreadable processes left out)."""
    by_inode = _listening_by_inode()
    found: dict[int, set[int]] = {}
    for pid in pids:
        fd_dir = Path("/proc") / str(pid) / "fd"
        try:
            targets = [os.readlink(fd_dir / fd) for fd in os.listdir(fd_dir)]
        except OSError:
            continue
        ports = {by_inode[t[len("socket:["):-1]] for t in targets
                 if t.startswith("socket:[") and t[len("socket:["):-1] in by_inode}
        found[pid] = ports
    return found


def command_line(pid: int) -> str:
    """What ps(1) shows for `pid` (Ray workers rewrite theirs as `ray::NAME`); empty when gone."""
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""
