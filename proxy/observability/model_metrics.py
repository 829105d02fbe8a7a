"""The node's model cache metrics, read from its stats file when Prometheus scrapes.

Owns `gitops_model_fetch_bytes_total{model}`, `gitops_model_fetch_seconds{model}`
(a summary: seconds spent fetching and verifying, and how many fetches),
`gitops_model_cache_hits_total` and `gitops_model_cache_bytes`. The replicas
that stage models write the numbers (`vocabulary.replicas.model_stats`, in the cache
directory: `replica.models`); each proxy worker reads the file at a scrape,
so whichever worker answers, the numbers are the node's. No file yet (no
model staged on the node): zeros, without per-model series. An I/O shell
(it reads the file).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import CollectorRegistry

from vocabulary.replicas.model_stats import CACHE_DIR_NAME, STATS_FILE, ModelCacheStats

__all__ = ["register_model_metrics"]


class _Family:
    """One metric family from the stats (one collector per family: docgen reads each one's labels)."""

    def __init__(
        self,
        build: Callable[[ModelCacheStats | None], Metric],
        labels: tuple[str, ...],
        read: Callable[[], ModelCacheStats | None],
    ) -> None:
        self._build, self._labelnames, self._read = build, labels, read

    def describe(self) -> Iterable[Metric]:
        return [self._build(None)]

    def collect(self) -> Iterator[Metric]:
        yield self._build(self._read())


def _fetch_bytes(stats: ModelCacheStats | None) -> Metric:
    family = CounterMetricFamily(
        "gitops_model_fetch_bytes", "Bytes of models fetched into this node's cache, by model.", labels=["model"]
    )
    for model, count in sorted((stats.fetch_bytes if stats else {}).items()):
        family.add_metric([model], count)
    return family


def _fetch_seconds(stats: ModelCacheStats | None) -> Metric:
    family = SummaryMetricFamily(
        "gitops_model_fetch_seconds",
        "Seconds spent fetching and verifying models into this node's cache, and how many fetches, by model.",
        labels=["model"],
    )
    for model, seconds in sorted((stats.fetch_seconds if stats else {}).items()):
        family.add_metric([model], stats.fetches.get(model, 0) if stats else 0, seconds)
    return family


def _hits(stats: ModelCacheStats | None) -> Metric:
    return CounterMetricFamily(
        "gitops_model_cache_hits",
        "Models replicas on this node staged from the cache without fetching them (0 bytes).",
        value=stats.hits if stats else 0,
    )


def _cache_bytes(stats: ModelCacheStats | None) -> Metric:
    return GaugeMetricFamily(
        "gitops_model_cache_bytes", "Bytes of models this node's cache holds.", value=stats.cache_bytes if stats else 0
    )


def register_model_metrics(registry: CollectorRegistry, cache_dir: str | None) -> None:
    """The four families in `registry`, read from `cache_dir`'s stats (None: the node's default cache)."""
    path = Path(cache_dir or os.path.join(tempfile.gettempdir(), CACHE_DIR_NAME)) / STATS_FILE

    def read() -> ModelCacheStats | None:
        try:
            return ModelCacheStats.from_json(path.read_text())
        except OSError:
            return None

    for build, labels in ((_fetch_bytes, ("model",)), (_fetch_seconds, ("model",)), (_hits, ()), (_cache_bytes, ())):
        registry.register(_Family(build, labels, read))
