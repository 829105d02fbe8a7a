"""The replica process's own stdout and stderr, read back from the files Ray writes them to.

Ray points each actor's file descriptors 1 and 2 at `worker-...out`/`.err`
in its node's session log directory; `OwnOutput` finds them through
`/proc/self/fd` and reads whole lines from a cursor, from a time, or the
last `TAIL_BYTES` (`read`). Files carry no timestamps, so `mark` notes the
files' sizes every few seconds (when they grew), and a read "since T"
starts where the files ended at the last mark before T. Outside Ray (a
terminal, a pipe) there is no file and every read says so. Must not: print
or interpret what it reads beyond dropping Ray's marker lines.
"""

from __future__ import annotations

import os
from collections import deque

from vocabulary.replicas.replica_output import MAX_READ_BYTES, OutputCursor, ReplicaOutput, ray_noise

__all__ = ["OwnOutput", "TAIL_BYTES"]

TAIL_BYTES = 16 * 1024  # without a cursor or a time: about the last hundred lines
_MARKS = 3600


def _file_of(fd: int) -> str | None:
    try:
        path = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    return path if os.path.isfile(path) else None


def _size(path: str | None) -> int:
    try:
        return os.path.getsize(path) if path else 0
    except OSError:
        return 0


class OwnOutput:
    def __init__(self, out_path: str | None = None, err_path: str | None = None) -> None:
        """The files behind this process's stdout and stderr, unless given."""
        self._out = out_path or _file_of(1)
        self._err = err_path or _file_of(2)
        self._marks: deque[tuple[float, int, int]] = deque(maxlen=_MARKS)

    def mark(self, now: float) -> None:
        """Note the files' sizes at `now` (wall-clock seconds) when they grew."""
        sizes = (_size(self._out), _size(self._err))
        if not self._marks or self._marks[-1][1:] != sizes:
            self._marks.append((now, *sizes))

    def read(self, replica_id: str, node_id: str, since: float | None, cursor: OutputCursor | None) -> ReplicaOutput:
        if self._out is None and self._err is None:
            return ReplicaOutput(replica_id=replica_id, node_id=node_id, missing="its output goes to no file")
        starts = self._starts(since, cursor)
        out, out_end = _lines(self._out, starts[0], aligned=cursor is not None or since is not None)
        err, err_end = _lines(self._err, starts[1], aligned=cursor is not None or since is not None)
        return ReplicaOutput(replica_id=replica_id, node_id=node_id, out=out, err=err,
                             cursor=OutputCursor(out=out_end, err=err_end))

    def _starts(self, since: float | None, cursor: OutputCursor | None) -> tuple[int, int]:
        if cursor is not None:
            return cursor.out, cursor.err
        if since is not None:
            before = [mark for mark in self._marks if mark[0] <= since]
            return (before[-1][1], before[-1][2]) if before else (0, 0)
        return max(0, _size(self._out) - TAIL_BYTES), max(0, _size(self._err) - TAIL_BYTES)


def _lines(path: str | None, start: int, aligned: bool) -> tuple[tuple[str, ...], int]:
    """Whole lines of `path` from byte `start` (at most `MAX_READ_BYTES`), and where they end.
    A start that is not `aligned` on a line drops the partial first line."""
    if path is None:
        return (), start
    try:
        with open(path, "rb") as file:
            if start > os.fstat(file.fileno()).st_size:
                start = 0  # the file was replaced (a restarted worker): from its start
            file.seek(start)
            chunk = file.read(MAX_READ_BYTES)
    except OSError:
        return (), start
    end = chunk.rfind(b"\n") + 1
    if end == 0 and len(chunk) < MAX_READ_BYTES:
        return (), start  # a line still being written
    whole = chunk[: end or len(chunk)]
    lines = whole.decode("utf-8", errors="replace").splitlines()
    if not aligned and start > 0 and lines:
        lines = lines[1:]
    return tuple(line for line in lines if not ray_noise(line)), start + len(whole)
