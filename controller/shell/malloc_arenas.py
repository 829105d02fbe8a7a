"""The controller process's C heap: freed memory handed back to the kernel.

glibc keeps what a process frees in its malloc arenas for reuse (up to
eight arenas per core, one for each thread that found the heap busy; a
controller's Ray threads have made most of them before its constructor
runs). `trim` (malloc_trim) returns the free pages of every arena, called
every ten seconds by the control loop, in a thread (a call walks every free
chunk: 10-40 ms on a fragmented 100 MB heap). Called once a minute, a soak's
controller gave back about 4 of 90 MB per call, so its memory was a sawtooth
a minute wide. A no-op where the C library has no such call (not glibc).
"""

from __future__ import annotations

import ctypes

__all__ = ["trim"]


def trim() -> bool:
    """Hand the free pages of every arena back to the kernel; True when some were."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    return bool(hasattr(libc, "malloc_trim") and libc.malloc_trim(0))
