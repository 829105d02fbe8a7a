"""A node's shadow mismatches, whichever of its proxy workers is asked.

A node's proxy workers share one address (SO_REUSEPORT), and the agent asks
one running worker per address for the node's mismatches, over Ray
(`ProxyActor.shadow_mismatches`, `gitops.admin.shadow_mismatches`). Each worker
therefore keeps its newest mismatches (`proxy.observability.shadow_compare.
MismatchLog`) in memory and also in a file of the node's shared directory
(`mismatches_<pid>.json`, the directory the workers' metrics live in: 0700,
this user's), written at most every `_WRITE_EVERY_S` after a mismatch and
replaced atomically; `recent()` answers the newest mismatches of every live
worker of the node. A dead worker's file is removed by the next reader: its
mismatches go with it, as a lone proxy's did.

Owns that file and its reading; not the comparison (`proxy.observability.shadow_compare`)
nor the HTTP answer (`proxy.app`).
"""

from __future__ import annotations

import asyncio
import glob
import json
import logging
import os
from proxy.observability.metrics import worker_alive
from proxy.observability.shadow_compare import Mismatch, MismatchLog

__all__ = ["NodeMismatchLog"]

logger = logging.getLogger(__name__)

_WRITE_EVERY_S = 0.2
_PREFIX = "mismatches_"


class NodeMismatchLog(MismatchLog):
    """This worker's `MismatchLog`, shared with the node's other workers through `directory`."""

    def __init__(self, directory: str, size: int = 50) -> None:
        super().__init__(size)
        self._size = size
        self._directory = directory
        self._path = os.path.join(directory, f"{_PREFIX}{os.getpid()}.json")
        self._write_pending = False

    def record(self, mismatch: Mismatch) -> None:
        super().record(mismatch)
        if not self._write_pending:
            self._write_pending = True
            asyncio.get_running_loop().call_later(_WRITE_EVERY_S, self._write)

    def recent(self) -> list[Mismatch]:
        """Newest first, over every live worker of the node (this one's own from memory)."""
        found = super().recent()
        for path in glob.glob(os.path.join(self._directory, f"{_PREFIX}*.json")):
            if path != self._path:
                found += self._read(path)
        found.sort(key=lambda mismatch: mismatch.at, reverse=True)
        return found[: self._size]

    def _write(self) -> None:
        self._write_pending = False
        partial = self._path + ".partial"
        try:
            with open(partial, "w") as out:
                json.dump([mismatch.to_json() for mismatch in super().recent()], out)
            os.replace(partial, self._path)
        except OSError as error:
            logger.warning("shadow mismatches not shared with the node's other proxy workers: %s", error)

    def _read(self, path: str) -> list[Mismatch]:
        pid = os.path.basename(path)[len(_PREFIX):].removesuffix(".json")
        if pid.isdigit() and not worker_alive(int(pid)):
            _remove(path)
            return []
        try:
            with open(path) as found:
                return [Mismatch(**entry) for entry in json.load(found)]
        except (OSError, ValueError, TypeError) as error:
            logger.warning("unreadable shadow mismatches of another worker (%s): %s", path, error)
            return []


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
