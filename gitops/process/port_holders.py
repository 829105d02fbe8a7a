"""Who listens on a TCP address: for a one-line "address in use" error.

`holder_of(host, port)` reads Linux's socket tables (`/proc/net/tcp`,
`/proc/net/tcp6`) for a listening socket on that port (bound to that host,
or to every address), then the open files of every process it may read
(`/proc/<pid>/fd`) for the one that holds it: "pid 1234 (python -m
http.server 8000)". Anything it cannot read (another user's process, no
/proc: macOS) leaves the answer at "in use". `listening_inodes` and
`describe` are pure. Never raises.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

__all__ = ["listening_inodes", "describe", "holder_of"]

_LISTEN = "0A"
_PROC = Path("/proc")
_COMMAND_CHARS = 120


def _address(hex_address: str) -> str:
    """The IP of a /proc/net/tcp* address column, written in the kernel's byte order."""
    raw = bytes.fromhex(hex_address)
    # Each 32-bit word is in host (little-endian) order.
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words))


def listening_inodes(table: str, host: str, port: int) -> list[str]:
    """Inodes of the sockets in a /proc/net/tcp* `table` listening on `port` at `host` or every address."""
    wanted: set[str] | None = {host, "0.0.0.0", "::", "::ffff:0.0.0.0"}
    if host in ("0.0.0.0", "::", ""):
        wanted = None  # a wildcard bind conflicts with any listener on the port
    found: list[str] = []
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != _LISTEN:
            continue
        address, _, hex_port = fields[1].partition(":")
        try:
            if int(hex_port, 16) != port:
                continue
            ip = _address(address)
        except ValueError:
            continue
        mapped = ip.removeprefix("::ffff:")
        if wanted is None or ip in wanted or mapped in wanted:
            found.append(fields[9])
    return found


def describe(pid: int, cmdline: bytes) -> str:
    """"pid 1234 (python -m http.server)", the command cut to a readable length."""
    command = " ".join(cmdline.replace(b"\0", b" ").decode(errors="replace").split())
    if len(command) > _COMMAND_CHARS:
        command = command[: _COMMAND_CHARS - 1] + "…"
    return f"pid {pid} ({command})" if command else f"pid {pid}"


def holder_of(host: str, port: int) -> str:
    """"in use by pid N (command)" for whoever listens on `host:port`, or "in use" when that cannot be read."""
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            inodes.update(listening_inodes((_PROC / "net" / table).read_text(), host, port))
        except OSError:
            continue
    inodes.discard("0")
    if not inodes:
        return "in use"
    targets = {f"socket:[{inode}]" for inode in inodes}
    try:
        pids = [int(entry) for entry in os.listdir(_PROC) if entry.isdigit()]
    except OSError:
        return "in use"
    for pid in sorted(pids):
        try:
            fds = os.listdir(_PROC / str(pid) / "fd")
            if any(os.readlink(_PROC / str(pid) / "fd" / fd) in targets for fd in fds):
                return f"in use by {describe(pid, (_PROC / str(pid) / 'cmdline').read_bytes())}"
        except OSError:
            continue
    return "in use"
