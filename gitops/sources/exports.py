"""Exports: a revision's files in a directory of their own, named by tree hash.

Replicas get an export as their runtime_env `working_dir`. Exports are
content-addressed (two commits with the same tree share one), appear
atomically (written to a scratch directory, then renamed, so a reader sees
no export or a complete one), and are pruned once no backend uses them. Any
`Source` keeps its exports here; how the files are written is the source's
business (`fill`). Must not: read git or parse specs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterable

__all__ = ["Exports"]

_SCRATCH = ".export-"


class Exports:
    """The exports directory of one source."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def ensure(self, tree: str, fill: Callable[[Path], None]) -> Path:
        """The export of `tree`, made by `fill(scratch_dir)` if it does not exist yet."""
        target = self.root / tree
        if target.is_dir():
            return target
        scratch = Path(tempfile.mkdtemp(prefix=_SCRATCH, dir=self.root))
        try:
            fill(scratch)
            os.rename(scratch, target)
        except OSError:
            if not target.is_dir():
                raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return target

    def prune(self, in_use: Iterable[str | Path | None]) -> list[str]:
        """Remove exports not in `in_use` (paths); returns the removed tree hashes."""
        keep = {Path(p).resolve() for p in in_use if p}
        removed = []
        for entry in self.root.iterdir():
            if entry.name.startswith(_SCRATCH) or entry.resolve() in keep:
                continue
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
        return removed
