"""What machine a figure was measured on, and what memory a process holds.

Owns: the machine description every result carries (cores, memory, CPU
model, load average, versions), how busy the machine was during a run, and
process look-ups by the process tree a benchmark started (so a measurement
never touches another user's Ray). Reads /proc only; starts and stops nothing.
"""

from __future__ import annotations

import os
import platform
import resource
import signal
import time
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Iterator

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


@contextmanager
def cpu_used() -> Iterator[dict[str, float]]:
    """While the block runs: how many cores the whole machine kept busy, and how
    many of them went to this process's waited-for children (the load generator).

    Fills the yielded dict on exit: `busy_cores` (from /proc/stat, every process
    and the kernel) and `children_cores` (getrusage of reaped children)."""
    figures: dict[str, float] = {}
    busy, children, started = _busy_s(), _children_s(), time.monotonic()
    yield figures
    elapsed = max(time.monotonic() - started, 1e-9)
    figures["busy_cores"] = (_busy_s() - busy) / elapsed
    figures["children_cores"] = (_children_s() - children) / elapsed


def _busy_s() -> float:
    """CPU seconds the machine spent on anything but idle and I/O wait since boot."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")  # guest time is already in user


def _children_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system, every thread) `pid` used since it started; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: fields 14, 15


def rss_kib(pid: int) -> float:
    """Resident set size of `pid` in KiB (every page it maps, shared or not)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return float(line.split()[1])
    raise ValueError(f"no VmRSS line for pid {pid}")


def pss_and_anonymous_mb(pid: int) -> tuple[float, float]:
    """`pid`'s PSS (shared pages split among their users) and its anonymous memory (heap and
    private mappings: what a leak grows), in MB."""
    fields = dict(line.split()[:2] for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:])
    try:
        return int(fields["Pss:"]) / 1024, int(fields["Anonymous:"]) / 1024
    except KeyError as missing:
        raise ValueError(f"no {missing} line for pid {pid}") from None


def pss_mb(pid: int) -> float:
    """Proportional set size of `pid` in MB (shared pages split among their users)."""
    return pss_and_anonymous_mb(pid)[0]


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
