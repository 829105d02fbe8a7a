"""What machine a figure was measured on, and what memory a process holds.

Owns: the machine description every result carries (cores, memory, CPU
model, load average, versions) and process look-ups by the process tree a
benchmark started (so a measurement never touches another user's Ray).
Reads /proc only; starts and stops nothing.
"""

from __future__ import annotations

import os
import platform
import signal
from importlib import metadata
from pathlib import Path

from controller.cluster import descendants


def describe() -> dict[str, object]:
    """Cores, memory, CPU model, load average and the versions that matter."""
    return {
        "cores": os.cpu_count() or 0,
        "memory_gb": round(_meminfo_kb("MemTotal") / 1024 / 1024, 1),
        "cpu_model": _cpu_model(),
        "load_average_1m": float(Path("/proc/loadavg").read_text().split()[0]),
        "python": platform.python_version(),
        "ray": _version("ray"),
        "kernel": platform.release(),
    }


def label(machine: dict[str, object]) -> str:
    """One line naming the machine, for figure captions."""
    return (f"{machine['cores']} cores, {machine['memory_gb']} GB, {machine['cpu_model']}; "
            f"Python {machine['python']}, Ray {machine['ray']}")


def pss_mb(pid: int) -> float:
    """Proportional set size of `pid` in MB (shared pages split among their users)."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    raise ValueError(f"no Pss line for pid {pid}")


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def find(root: int, title: str) -> list[int]:
    """Processes below `root` whose command line (Ray's process title) contains `title`."""
    return [pid for pid in descendants(root) if title in command_line(pid)]


def kill9(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


def _meminfo_kb(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def listener_pids(port: int) -> list[int]:
    """Processes holding a socket that listens on TCP `port` (any address)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(fields[9])
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            links = [os.readlink(fd) for fd in (entry / "fd").iterdir()]
        except OSError:
            continue
        if any(link.startswith("socket:[") and link[8:-1] in inodes for link in links):
            pids.append(int(entry.name))
    return pids
