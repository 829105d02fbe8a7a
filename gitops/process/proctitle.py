"""This process's command line as other users' `ps` shows it, rewritten in place.

Owns one thing: overwriting the memory the kernel reads /proc/PID/cmdline
from (`arg_start`..`arg_end` in /proc/self/stat, Linux 3.5+) with a given
arguments, so a secret passed on the command line is gone from `ps` once
the agent has started. They must not be longer than the original. Must
not: decide what to hide (that is `gitops.redaction`). Elsewhere than
Linux it does nothing and says so.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Sequence

__all__ = ["retitle"]


def retitle(argv: Sequence[str]) -> bool:
    """Show `argv` as the command line; False if this system cannot."""
    try:
        stat = Path("/proc/self/stat").read_text()
    except OSError:
        return False
    # Fields after the command name, which may hold spaces: field 3 first.
    fields = stat.rpartition(")")[2].split()
    start, end = int(fields[48 - 3]), int(fields[49 - 3])
    data = "\0".join(argv).encode()
    size = end - start
    if size <= 0 or len(data) > size:
        return False
    ctypes.memmove(start, data.ljust(size, b"\0"), size)
    return True
