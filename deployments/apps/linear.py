"""A linear model served over the Open Inference Protocol (`protocol = "v2"`, docs/guides/v2.md).

`y = x @ w + b` for each row of `x`, and each row's label (the column of its
largest `y`). The weights are the pinned model `linear` ([models.linear]): a
JSON file `{"w": [[...], ...], "b": [...], "labels": [...]}`, read in
`load()`, so v2 clients see its digest as the model's version.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ray_gitops import serving


class Linear:
    def __init__(self, model: str = "linear") -> None:
        self.model = model
        self.ready = False  # /v2/health/ready says 400 until load() has run

    def load(self) -> None:
        weights = json.loads(Path(serving.model_path(self.model)).read_text())
        self.w = np.asarray(weights["w"], dtype=np.float32)
        self.b = np.asarray(weights["b"], dtype=np.float32)
        self.labels = [label.encode() for label in weights["labels"]]
        self.ready = True

    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, Any]:
        y = inputs["x"] @ self.w + self.b
        return {"y": y, "label": [self.labels[column] for column in y.argmax(axis=1)]}
