"""Triggers that say "look at git again": polling with jitter and a ref watch.

- `jittered(interval, jitter, rng)`: the next poll delay; the jitter keeps a
  fleet of agents from fetching the same server in lockstep.
- `backoff(failures, base_s, cap_s)`: the delay before retrying after
  transient failures in a row: doubling, never longer than the cap.
- `RefWatcher`: a watchdog observer on a local repository's git dir that
  calls back when a branch ref, `packed-refs` or `HEAD` changes, so a
  `git commit` there is noticed at once instead of at the next poll.

The callback runs on the observer's thread; callers hand it over to their
event loop (`loop.call_soon_threadsafe`). Must not: read commits, decide
whether anything changed (the agent re-reads the branch; a spurious wake-up
costs one cheap tick).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Callable

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

__all__ = ["jittered", "backoff", "RefWatcher", "is_ref_path"]


def jittered(interval: float, jitter: float = 0.1, rng: random.Random | None = None) -> float:
    """`interval` give or take `jitter` (a fraction), never negative."""
    spread = interval * jitter
    return max(0.0, interval + (rng or random).uniform(-spread, spread))


def backoff(failures: int, base_s: float, cap_s: float) -> float:
    """`base_s` after the first failure, doubling with each further one, at most `cap_s`."""
    return min(cap_s, base_s * 2 ** max(0, failures - 1))


def is_ref_path(git_dir: Path, path: str) -> bool:
    """True for files that move a branch: refs/**, packed-refs, HEAD (not *.lock)."""
    try:
        relative = Path(path).resolve().relative_to(git_dir.resolve())
    except ValueError:
        return False
    if relative.suffix == ".lock" or not relative.parts:
        return False
    return relative.parts[0] == "refs" or relative.as_posix() in ("packed-refs", "HEAD")


class _RefEvents(FileSystemEventHandler):
    def __init__(self, git_dir: Path, on_change: Callable[[], None]) -> None:
        self._git_dir = git_dir
        self._on_change = on_change

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return
        # git writes `main.lock` and renames it to `main`: the rename's
        # destination is the ref that changed.
        for path in (event.src_path, getattr(event, "dest_path", "")):
            if path and is_ref_path(self._git_dir, str(path)):
                self._on_change()
                return


class RefWatcher:
    """Watches a git dir's refs; `start()` / `stop()` own the observer thread."""

    def __init__(self, git_dir: Path, on_change: Callable[[], None]) -> None:
        self._git_dir = git_dir
        self._observer = Observer()
        self._observer.daemon = True
        self._observer.schedule(_RefEvents(git_dir, on_change), str(git_dir), recursive=True)

    def start(self) -> None:
        self._observer.start()

    def stop(self) -> None:
        self._observer.stop()
        self._observer.join(timeout=5)
