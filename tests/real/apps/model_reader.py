"""Test user code for the models' multi-node tier: reads its staged model and says where it runs."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ray_gitops import serving

__all__ = ["ModelReader"]


class ModelReader:
    def __init__(self) -> None:
        self.sha256 = hashlib.sha256(Path(serving.model_path("weights")).read_bytes()).hexdigest()

    def __call__(self, request: object) -> dict[str, str]:
        return {"sha256": self.sha256, "replica": serving.context().replica_id}
