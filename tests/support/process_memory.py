"""A process's resident memory as Linux reports it (/proc/PID/status), for tests that bound what a
hostile client makes a server hold: now (VmRSS), and the highest since the last reset (VmHWM; the
kernel resets it when "5" is written to /proc/PID/clear_refs), which catches a peak between two
looks that sampling would miss."""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["peak_resident_bytes", "reset_peak", "resident_bytes"]


def _status_kb(pid: int, field: str) -> int:
    found = re.search(rf"^{field}:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.MULTILINE)
    assert found is not None, f"no {field} for pid {pid}"
    return int(found.group(1)) * 1024


def resident_bytes(pid: int) -> int:
    """Resident memory of `pid` now, in bytes (VmRSS)."""
    return _status_kb(pid, "VmRSS")


def peak_resident_bytes(pid: int) -> int:
    """The most memory `pid` has had resident since it started or since `reset_peak`, in bytes (VmHWM)."""
    return _status_kb(pid, "VmHWM")


def reset_peak(pid: int) -> None:
    """Start `peak_resident_bytes` of `pid` again from its resident memory now."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
