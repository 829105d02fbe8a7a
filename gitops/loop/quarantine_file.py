"""The agent's quarantine on disk: `<state-dir>/quarantine.json`, kept across restarts.

Owns reading and writing the one file; what a quarantine means is
`gitops.reconcile.rollback`'s. Written atomically (a temporary file renamed over the
old one), so a crash leaves the old quarantine or the new one, never half.
An unreadable file is reported, not guessed at.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from gitops.reconcile.rollback import Quarantine

__all__ = ["QuarantineFile"]


class QuarantineFile:
    def __init__(self, path: Path) -> None:
        self._path = path

    def load(self) -> Quarantine | None:
        try:
            data = json.loads(self._path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            raise ValueError(f"{self._path}: cannot read the quarantine ({error}); remove the file to lift it") from None
        return Quarantine.from_json(data)

    def save(self, quarantine: Quarantine | None) -> None:
        if quarantine is None:
            self._path.unlink(missing_ok=True)
            return
        self._path.parent.mkdir(parents=True, exist_ok=True)
        partial = self._path.with_suffix(".json.tmp")
        partial.write_text(json.dumps(quarantine.to_json(), indent=2, sort_keys=True))
        os.replace(partial, self._path)
