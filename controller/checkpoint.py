"""The controller's checkpoint: versioned JSON behind a small storage interface.

Owns the checkpoint's envelope (schema version, written-at), encoding and
decoding (JSON only, never pickle), and two storages: Ray's internal KV for
the real controller and an in-memory one for tests. What goes inside is the
state modules' `to_json` output; this module does not interpret it.
"""

from __future__ import annotations

import json
import time
from typing import Any, Protocol

__all__ = [
    "SCHEMA_VERSION",
    "CheckpointError",
    "Storage",
    "MemoryStorage",
    "RayKVStorage",
    "encode",
    "decode",
]

SCHEMA_VERSION = 2  # 2: replica ids from one controller-wide serial
_KEY = "gitops-controller-checkpoint"


class CheckpointError(Exception):
    """The stored checkpoint cannot be read by this version of the controller."""


class Storage(Protocol):
    def put(self, data: bytes) -> None: ...

    def get(self) -> bytes | None: ...

    def delete(self) -> None: ...


class MemoryStorage:
    def __init__(self) -> None:
        self.data: bytes | None = None
        self.writes = 0

    def put(self, data: bytes) -> None:
        self.data = data
        self.writes += 1

    def get(self) -> bytes | None:
        return self.data

    def delete(self) -> None:
        self.data = None


class RayKVStorage:
    """Ray's internal KV (GCS), one key per controller namespace."""

    def __init__(self, namespace: str) -> None:
        self._namespace = namespace

    def put(self, data: bytes) -> None:
        from ray.experimental import internal_kv

        internal_kv._internal_kv_put(_KEY, data, overwrite=True, namespace=self._namespace)

    def get(self) -> bytes | None:
        from ray.experimental import internal_kv

        return internal_kv._internal_kv_get(_KEY, namespace=self._namespace)

    def delete(self) -> None:
        from ray.experimental import internal_kv

        internal_kv._internal_kv_del(_KEY, namespace=self._namespace)


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
        raise CheckpointError(
            f"controller checkpoint has schema {schema!r}; this controller reads {SCHEMA_VERSION}"
        )
    return envelope["body"]
