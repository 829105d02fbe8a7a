"""A replica's own output (stdout and stderr), as `gitops logs` reads it.

Ray sends each actor's stdout and stderr to files of its node's session
log directory (`worker-<id>-<job>-<pid>.out`/`.err`), on whichever node the
actor runs; a replica reads its own (`replica.host.Replica.output`) and the
answer travels back over Ray, so every node's replicas are read alike.
`OutputCursor` is where a reader stopped in both files; `ReplicaOutput` the
whole lines read since, without the marker lines Ray writes into them
(`ray_noise`); a replica the controller replaced (it failed to start, died,
failed its health checks) is one too, with `ended` saying how and its error
(the exception with the file and line of the user's code) as its stderr and,
when it could still be read before the kill, its own last lines.
Plain values; no I/O.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["OutputCursor", "ReplicaOutput", "ray_noise", "MAX_READ_BYTES"]

# Read at most this much of each file per call; a follower comes back for the rest.
MAX_READ_BYTES = 256 * 1024

_RAY_MARKERS = (":job_id:", ":actor_name:", ":task_name:", ":task_attempt_number:")


class OutputCursor(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    out: int = 0  # bytes of stdout already read
    err: int = 0  # bytes of stderr already read


class ReplicaOutput(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    replica_id: str
    node_id: str = ""
    out: tuple[str, ...] = ()  # whole lines of stdout, oldest first
    err: tuple[str, ...] = ()  # whole lines of stderr (tracebacks land here)
    cursor: OutputCursor = OutputCursor()
    missing: str = ""  # why nothing could be read ("" when it could)
    # A replica replaced since the controller started: how it ended ("failed to start",
    # "died"...), its error in `err`; "" for a replica of now, whose own output this is.
    ended: str = ""
    # An ended replica's own last lines (stdout, then stderr), read just before it was killed;
    # empty when it could not be read (its process was already gone).
    last_output: tuple[str, ...] = ()


def ray_noise(line: str) -> bool:
    """A marker line Ray writes into a worker's files (which job, actor or task runs), not user output."""
    return line.startswith(_RAY_MARKERS)
