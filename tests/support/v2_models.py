"""A v2 model class and its backend for the v2 tests of both surfaces (REST: tests/component/test_v2_app.py,
gRPC: tests/component/test_v2_grpc.py): `Adder` sums rows and upper-cases words, and fails or answers
off its metadata when its parameters ask.

Moved out of tests/component/test_v2_app.py, whose tests use them too."""

from __future__ import annotations

from typing import Any

import numpy as np

from vocabulary.spec.backends import BackendConfig

__all__ = ["V2_TABLE", "Adder", "backend"]


MODULE = __name__  # the replica host imports Adder from here
V2_TABLE: dict[str, Any] = {
    "name": "adder",
    "platform": "numpy",
    "inputs": [
        {"name": "a", "datatype": "FP32", "shape": [-1, 2]},
        {"name": "words", "datatype": "BYTES", "shape": [-1]},
    ],
    "outputs": [
        {"name": "sum", "datatype": "FP32", "shape": [-1]},
        {"name": "upper", "datatype": "BYTES", "shape": [-1]},
        {"name": "flags", "datatype": "BOOL", "shape": [-1, 2]},
    ],
}


class Adder:
    """Sums each row of `a`, upper-cases `words`; says what parameters it was given."""

    def __init__(self) -> None:
        self.ready = True
        self.loads = 0
        self.seen: list[dict[str, Any]] = []

    def load(self) -> None:
        self.loads += 1

    def predict(self, inputs: dict[str, np.ndarray], parameters: dict[str, Any]) -> dict[str, Any]:
        self.seen.append(parameters)
        if parameters.get("fail"):
            raise RuntimeError("asked to fail")
        if parameters.get("wrong_shape"):
            return {"sum": np.zeros((1, 1)), "upper": [b""], "flags": np.zeros((1, 2), dtype=bool)}
        a = inputs["a"]
        return {"sum": a.sum(axis=1), "upper": [word.upper() for word in inputs["words"]], "flags": a > 1}


def backend(**v2: Any) -> BackendConfig:
    return BackendConfig.model_validate({
        "name": "adder-backend", "version": "code123", "import_path": f"{MODULE}:Adder",
        "protocol": "v2", "v2": {**V2_TABLE, **v2},
    })


