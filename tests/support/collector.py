"""The test process's own garbage collector, kept out of a window a test times.

A test that times answers on its own clock (a 504 at a 200 ms deadline) times
its own process too. A real-tier pytest worker late in a run holds hundreds of
thousands of objects (its Ray driver, every module its tests imported), and a
full collection of them is about 0.1 s on a quiet machine, several times that on
one loaded by the other workers: a pause the proxy never caused. `settled`
freezes what the process holds before the window (so a collection inside walks
only what the window made) and records each collection's pause, for the
message of an assertion that still fails.
Must not: change the collector of any other process, or outlive its window.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["settled"]


@contextmanager
def settled() -> Iterator[list[float]]:
    """Within: the process's objects frozen out of its collector's sight; yields the list to which each
    collection's pause (seconds) is appended. After: unfrozen, and no pause recorded any more."""
    pauses: list[float] = []
    started: list[float] = []

    def timed(phase: str, _: dict[str, Any]) -> None:
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            pauses.append(time.perf_counter() - started.pop())

    gc.collect()
    gc.freeze()
    gc.callbacks.append(timed)
    try:
        yield pauses
    finally:
        gc.callbacks.remove(timed)
        gc.unfreeze()
