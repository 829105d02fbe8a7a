"""LLM token metrics per backend and model, as the file a node's replicas share (docs/guides/llm.md).

An OpenAI backend's replicas measure each model's tokens at the engine
(`ray_gitops.llm.token_stats`) and add what they measured since they last
did to one small JSON file in the node's model cache directory,
`token_stats.json` (`replica.token_stats_file` reads, locks and writes it).
The node's proxies read it when Prometheus scrapes them
(`proxy.observability.token_metrics`), as they read the model cache's
`stats.json`: each replica on exactly one node, each node's numbers exported
by its own proxies, so summing over nodes counts every request once.

`ModelTokens` is one model's counts: prompt and completion tokens, requests
by how they ended, and two histograms with fixed buckets (time to first
token, time between tokens), so a user computes p50/p99 in Grafana and
adds replicas by adding buckets. `NodeTokenCounts` is the file: backend ->
model -> counts, at most `MODELS_PER_BACKEND` model names per backend (the
rest are counted under `other`); model names come from the spec (the served
model and its LoRA adapters), never from a request. Values only.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = [
    "INTER_TOKEN_BUCKETS", "MODELS_PER_BACKEND", "OTHER_MODEL", "TOKEN_STATS_FILE", "TTFT_BUCKETS",
    "Buckets", "ModelTokens", "NodeTokenCounts",
]

TOKEN_STATS_FILE = "token_stats.json"  # in the node's model cache directory, beside the cache's stats.json
# From a prompt already cached (milliseconds) through a long prefill on a busy engine to a queue of seconds.
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# One output token: tens of microseconds on a tiny CPU model, 10-100 ms on a large model, more under load.
INTER_TOKEN_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1,
                       0.25, 0.5, 1.0)
# Model names one backend's counts keep apart (its served model and adapters); the rest are 'other'.
MODELS_PER_BACKEND = 32
OTHER_MODEL = "other"


@dataclass
class Buckets:
    """A histogram over fixed bounds: counts per bucket (not cumulative; the last is above every bound) and the sum."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        if len(self.counts) != len(self.bounds) + 1:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float, weight: int = 1) -> None:
        """`weight` observations of `value` (a delta of `weight` tokens, each `value` apart)."""
        index = next((i for i, bound in enumerate(self.bounds) if value <= bound), len(self.bounds))
        self.counts[index] += weight
        self.total += value * weight

    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """Prometheus's buckets: (upper bound, observations at or below it), ending with +Inf."""
        running, rows = 0, []
        for bound, count in zip([*map(str, self.bounds), "+Inf"], self.counts):
            running += count
            rows.append((bound, running))
        return rows

    def plus(self, other: Buckets) -> Buckets:
        return Buckets(self.bounds, [a + b for a, b in zip(self.counts, other.counts)], self.total + other.total)

    def minus(self, other: Buckets) -> Buckets:
        return Buckets(self.bounds, [a - b for a, b in zip(self.counts, other.counts)], self.total - other.total)


@dataclass
class ModelTokens:
    """One model's token metrics: what its requests used, how they ended, how fast tokens came."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    finished: int = 0
    refused: int = 0
    cancelled: int = 0
    ttft_s: Buckets = field(default_factory=lambda: Buckets(TTFT_BUCKETS))
    inter_token_s: Buckets = field(default_factory=lambda: Buckets(INTER_TOKEN_BUCKETS))

    _COUNTS: ClassVar[tuple[str, ...]] = ("prompt_tokens", "completion_tokens", "finished", "refused", "cancelled")

    def plus(self, other: ModelTokens) -> ModelTokens:
        return ModelTokens(
            self.prompt_tokens + other.prompt_tokens, self.completion_tokens + other.completion_tokens,
            self.finished + other.finished, self.refused + other.refused, self.cancelled + other.cancelled,
            self.ttft_s.plus(other.ttft_s), self.inter_token_s.plus(other.inter_token_s),
        )

    def minus(self, other: ModelTokens) -> ModelTokens:
        """What happened since `other`, an earlier copy of these counts."""
        return ModelTokens(
            self.prompt_tokens - other.prompt_tokens, self.completion_tokens - other.completion_tokens,
            self.finished - other.finished, self.refused - other.refused, self.cancelled - other.cancelled,
            self.ttft_s.minus(other.ttft_s), self.inter_token_s.minus(other.inter_token_s),
        )

    def copy(self) -> ModelTokens:
        return self.plus(ModelTokens())

    def empty(self) -> bool:
        return not any(getattr(self, n) for n in self._COUNTS) and not self.ttft_s.count() \
            and not self.inter_token_s.count()

    def to_dict(self) -> dict[str, Any]:
        return {
            **{n: getattr(self, n) for n in self._COUNTS},
            "ttft_s": {"counts": self.ttft_s.counts, "sum": self.ttft_s.total},
            "inter_token_s": {"counts": self.inter_token_s.counts, "sum": self.inter_token_s.total},
        }

    @classmethod
    def from_dict(cls, data: Any) -> ModelTokens:
        """The counts `data` holds; anything malformed (a histogram of other bounds too) is left at zero."""
        if not isinstance(data, dict):
            return cls()
        counts = {n: data.get(n, 0) for n in cls._COUNTS}
        return cls(
            **{n: c if isinstance(c, int) and c >= 0 else 0 for n, c in counts.items()},
            ttft_s=_buckets(data.get("ttft_s"), TTFT_BUCKETS),
            inter_token_s=_buckets(data.get("inter_token_s"), INTER_TOKEN_BUCKETS),
        )


def _buckets(data: Any, bounds: tuple[float, ...]) -> Buckets:
    if not isinstance(data, dict):
        return Buckets(bounds)
    counts, total = data.get("counts"), data.get("sum")
    if (not isinstance(counts, list) or len(counts) != len(bounds) + 1
            or not all(isinstance(c, int) and c >= 0 for c in counts)
            or not isinstance(total, (int, float)) or not math.isfinite(total)):
        return Buckets(bounds)
    return Buckets(bounds, list(counts), float(total))


@dataclass
class NodeTokenCounts:
    """The node's file: every backend's counts per model, as its replicas added them."""

    backends: dict[str, dict[str, ModelTokens]] = field(default_factory=dict)

    def add(self, backend: str, models: dict[str, ModelTokens]) -> None:
        """A replica's counts since it last added, per model; past `MODELS_PER_BACKEND` names, under `other`."""
        known = self.backends.setdefault(backend, {})
        for model, counts in models.items():
            if model not in known and len(known) >= MODELS_PER_BACKEND:
                model = OTHER_MODEL
            known[model] = known[model].plus(counts) if model in known else counts

    def to_json(self) -> str:
        return json.dumps(
            {"backends": {b: {m: c.to_dict() for m, c in models.items()} for b, models in self.backends.items()}},
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> NodeTokenCounts:
        """The counts a file holds; an empty or unreadable file is no counts yet."""
        try:
            data = json.loads(text) if text.strip() else {}
        except ValueError:
            return cls()
        backends = data.get("backends") if isinstance(data, dict) else None
        if not isinstance(backends, dict):
            return cls()
        return cls({
            str(backend): {str(model): ModelTokens.from_dict(counts) for model, counts in models.items()}
            for backend, models in backends.items() if isinstance(models, dict)
        })
