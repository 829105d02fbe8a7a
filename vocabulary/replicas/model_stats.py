"""What a node's model cache has done, as the file its replicas share (docs/guides/models.md).

Every replica that stages a model (`replica.models`) adds to one small JSON
file in the node's cache directory, `stats.json`: the bytes fetched and the
seconds spent per model, the cache hits, and the bytes the cache holds. The
node's proxies read it when Prometheus scrapes them (`proxy.observability.model_metrics`),
so the node's numbers are exported once, by the process that already serves
the node's metrics. Values only: the callers read, lock and write the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

__all__ = ["CACHE_DIR_NAME", "STATS_FILE", "ModelCacheStats"]

CACHE_DIR_NAME = "ray-gitops-models"  # in the node's temporary directory, when no --model-cache-dir is given
STATS_FILE = "stats.json"


@dataclass
class ModelCacheStats:
    fetch_bytes: dict[str, int] = field(default_factory=dict)
    fetch_seconds: dict[str, float] = field(default_factory=dict)
    fetches: dict[str, int] = field(default_factory=dict)
    hits: int = 0
    cache_bytes: int = 0

    def staged(self, model: str, fetched_bytes: int, seconds: float, cache_bytes: int) -> None:
        """One stage: a fetch (bytes and time counted under the model's name) or a hit."""
        if fetched_bytes:
            self.fetch_bytes[model] = self.fetch_bytes.get(model, 0) + fetched_bytes
            self.fetch_seconds[model] = self.fetch_seconds.get(model, 0.0) + seconds
            self.fetches[model] = self.fetches.get(model, 0) + 1
        else:
            self.hits += 1
        self.cache_bytes = cache_bytes

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ModelCacheStats:
        """The stats a file holds; an empty or unreadable file is no stats yet."""
        try:
            data = json.loads(text) if text.strip() else {}
            return cls(**{key: data[key] for key in cls.__dataclass_fields__ if key in data})
        except (ValueError, TypeError):
            return cls()
