"""The controller process's C heap: at most two malloc arenas, and freed memory handed back.

glibc gives each thread that finds the heap busy an arena of its own, up to
eight per core, and keeps what is freed in each for reuse. In the
controller, Ray's threads (gRPC, the core worker's I/O) take turns
allocating, so a new controller climbs for minutes towards that many
partly used arenas, which reads as growth in a soak. `cap` sets the cap
early in the process's life (M_ARENA_MAX, as `MALLOC_ARENA_MAX=2` would, but
without an environment variable every actor the controller starts would
inherit through Ray's runtime_env); `trim` (malloc_trim) returns the free
pages of every arena to the kernel, called once a minute by the control
loop. Both are no-ops where the C library has no such calls (not glibc).
"""

from __future__ import annotations

import ctypes

__all__ = ["cap", "trim"]

_M_ARENA_MAX = -8  # glibc's malloc.h


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def cap(arenas: int = 2) -> bool:
    """At most `arenas` malloc arenas from now on; True when the C library took it."""
    libc = _libc()
    return bool(libc is not None and hasattr(libc, "mallopt") and libc.mallopt(_M_ARENA_MAX, arenas))


def trim() -> bool:
    """Hand the free pages of every arena back to the kernel; True when some were."""
    libc = _libc()
    return bool(libc is not None and hasattr(libc, "malloc_trim") and libc.malloc_trim(0))
