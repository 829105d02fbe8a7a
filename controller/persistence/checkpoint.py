"""The controller's checkpoint: versioned JSON behind a small storage interface.

Owns the checkpoint's envelope (schema version, written-at), encoding and
decoding (JSON only, never pickle), the `Storage` protocol the controller
writes through, and the `Checkpointer` that writes through it only what
changed. Pure: the storages live at the edges (Ray's internal KV in
`controller.persistence.ray_kv`, an in-memory one in `controller.testing`). What goes
inside is the state modules' `to_json` output; this module does not
interpret it.
"""

from __future__ import annotations

import json
import time
from typing import Any, Protocol

__all__ = [
    "SCHEMA_VERSION",
    "RESET_HINT",
    "CheckpointError",
    "Storage",
    "Checkpointer",
    "encode",
    "decode",
]

SCHEMA_VERSION = 2  # 2: replica ids from one controller-wide serial
# What a user does about a checkpoint this controller cannot read. Nothing in
# it is lost for good: the agent re-applies everything from git.
RESET_HINT = (
    "discard it with `gitops reset-controller --ray-address ADDRESS --namespace NAMESPACE` while no controller runs; "
    "the agent then rebuilds the controller's state from git"
)


class CheckpointError(Exception):
    """The stored checkpoint cannot be read by this version of the controller."""


class Storage(Protocol):
    """Where the one checkpoint of a controller lives."""

    def put(self, data: bytes) -> None: ...

    def get(self) -> bytes | None: ...

    def delete(self) -> None: ...


class Checkpointer:
    """The controller's one checkpoint in a `Storage`: read at start, written when it changed."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self._saved: dict[str, Any] | None = None

    def load(self) -> dict[str, Any] | None:
        """The stored body (None: no checkpoint); `CheckpointError` when it cannot be read."""
        data = self._storage.get()
        return None if data is None else decode(data)

    def save(self, body: dict[str, Any]) -> None:
        if body == self._saved:
            # An idempotent repeat changed nothing: no write.
            return
        self._storage.put(encode(body))
        self._saved = body

    def delete(self) -> None:
        self._storage.delete()


def encode(body: dict[str, Any]) -> bytes:
    envelope = {"schema": SCHEMA_VERSION, "written_at": time.time(), "body": body}
    return json.dumps(envelope, separators=(",", ":"), sort_keys=True).encode()


def decode(data: bytes) -> dict[str, Any]:
    try:
        envelope = json.loads(data)
    except ValueError as err:
        raise CheckpointError(f"controller checkpoint is not JSON: {err}") from err
    schema = envelope.get("schema") if isinstance(envelope, dict) else None
    if schema != SCHEMA_VERSION:
        raise CheckpointError(_unreadable(schema))
    return envelope["body"]


def _unreadable(schema: object) -> str:
    if isinstance(schema, int) and schema > SCHEMA_VERSION:
        return (
            f"controller checkpoint has schema {schema}, newer than this controller reads ({SCHEMA_VERSION}): "
            f"a newer ray-gitops wrote it. Upgrade ray-gitops, or {RESET_HINT}"
        )
    return f"controller checkpoint has schema {schema!r}, which this controller ({SCHEMA_VERSION}) cannot read; {RESET_HINT}"
