"""The controller's checkpoint storage in Ray's internal KV (the GCS).

Owns the key and the three KV calls; the checkpoint's form is
`controller.persistence.checkpoint`'s. One key per controller namespace.
"""

from __future__ import annotations

from ray.experimental import internal_kv

__all__ = ["RayKVStorage"]

_KEY = "gitops-controller-checkpoint"


class RayKVStorage:
    """`controller.persistence.checkpoint.Storage` over Ray's internal KV."""

    def __init__(self, namespace: str) -> None:
        self._namespace = namespace

    def put(self, data: bytes) -> None:
        internal_kv._internal_kv_put(_KEY, data, overwrite=True, namespace=self._namespace)

    def get(self) -> bytes | None:
        return internal_kv._internal_kv_get(_KEY, namespace=self._namespace)

    def delete(self) -> None:
        internal_kv._internal_kv_del(_KEY, namespace=self._namespace)
