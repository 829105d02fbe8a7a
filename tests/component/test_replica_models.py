"""The replica host stages its backend's models before any user code runs:
the constructor already reads `ray_gitops.serving.model_path`, and a model whose
bytes do not match fails `initialize()` with one line, before user code."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from ray_gitops import serving
from replica.host import Replica
from replica.models import ModelError
from vocabulary.spec.backends import BackendConfig, ModelConfig

MODULE = __name__
CONSTRUCTED: list[str] = []


class Reader:
    def __init__(self) -> None:
        CONSTRUCTED.append(Path(serving.model_path("weights")).read_text())

    def __call__(self, request: object) -> str:
        return "ok"


def _reader(source: Path, digest: str) -> BackendConfig:
    weights = ModelConfig(name="weights", source=source.as_uri(), sha256=digest, load_timeout_s=30.0)
    return BackendConfig(name="b", version="v1", import_path=f"{MODULE}:Reader", model_sources={"weights": weights})


def test_models_are_staged_before_the_constructor_runs(tmp_path: Path) -> None:
    source = tmp_path / "w.txt"
    source.write_text("weights v1")
    digest = hashlib.sha256(b"weights v1").hexdigest()
    replica = Replica(_reader(source, digest), "r1", model_cache=(str(tmp_path / "cache"), None))
    asyncio.run(replica.initialize())
    assert CONSTRUCTED[-1] == "weights v1"
    assert serving.model_path("weights") == str(tmp_path / "cache" / "entries" / digest / "w.txt")
    with pytest.raises(serving.ModelMissing, match="model 'other' is not in this backend's models"):
        serving.model_path("other")


def test_a_wrong_digest_fails_initialize_before_user_code(tmp_path: Path) -> None:
    source = tmp_path / "w.txt"
    source.write_text("weights v1")
    constructed = len(CONSTRUCTED)
    replica = Replica(_reader(source, "0" * 64), "r1", model_cache=(str(tmp_path / "cache"), None))
    line = r"^model weights \(file://.*/w.txt\): its bytes have sha256 [0-9a-f]{64}, but git pins 0{64}$"
    with pytest.raises(ModelError, match=line):
        asyncio.run(replica.initialize())
    assert len(CONSTRUCTED) == constructed
