"""The node's LLM token metrics per backend and model, read from its file when Prometheus scrapes.

Owns `gitops_llm_time_to_first_token_seconds{backend,model}` and
`gitops_llm_inter_token_seconds{backend,model}` (histograms: p50/p99 by
`histogram_quantile`; the inter-token histogram's `_count` over its `_sum` is
the decode speed in tokens/s), `gitops_llm_tokens_total{backend,model,direction}`
(prompt, completion) and `gitops_llm_requests_total{backend,model,result}`
(finished, refused: the engine refused the prompt, cancelled: the client left
or the engine failed). The engine's numbers, measured in the replicas of
`[backends.X.llm]` backends (`ray_gitops.llm.token_stats`), which add them
to the node's `token_stats.json` in its model cache directory
(`vocabulary.replicas.token_counts`); each proxy worker reads that file at a
scrape, so whichever worker answers, the numbers are the node's, and each
replica's are exported by its own node's proxies only.

Labels: `model` is a name the backend's spec gives (its served model, its
LoRA adapters), at most `MODELS_PER_BACKEND` per backend (then `other`);
never a tenant or any part of a request. A backend the proxy no longer
serves is left out of a scrape (its counts stay in the file: re-created, it
resumes them). No file yet (no LLM request on the node): no series. An I/O
shell (it reads the file).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

from vocabulary.replicas.model_stats import CACHE_DIR_NAME
from vocabulary.replicas.token_counts import TOKEN_STATS_FILE, Buckets, ModelTokens, NodeTokenCounts

__all__ = ["register_token_metrics"]

_Rows = list[tuple[str, str, ModelTokens]]  # (backend, model, counts), the served backends' only


class _Family:
    """One metric family from the file (one collector per family: docgen reads each one's labels)."""

    def __init__(self, build: Callable[[_Rows], Metric], labels: tuple[str, ...], read: Callable[[], _Rows]) -> None:
        self._build, self._labelnames, self._read = build, labels, read

    def describe(self) -> Iterable[Metric]:
        return [self._build([])]

    def collect(self) -> Iterator[Metric]:
        yield self._build(self._read())


def _histogram(name: str, help_text: str, pick: Callable[[ModelTokens], Buckets]) -> Callable[[_Rows], Metric]:
    def build(rows: _Rows) -> Metric:
        family = HistogramMetricFamily(name, help_text, labels=["backend", "model"])
        for backend, model, counts in rows:
            buckets = pick(counts)
            family.add_metric([backend, model], buckets.cumulative(), buckets.total)
        return family

    return build


_ttft = _histogram(
    "gitops_llm_time_to_first_token_seconds",
    "Time from an LLM request's start at the engine to its first token, by backend and model (the engine's "
    "own measure, in its replica).",
    lambda counts: counts.ttft_s,
)
_inter_token = _histogram(
    "gitops_llm_inter_token_seconds",
    "Time between an LLM answer's tokens at the engine (a delta of k tokens: k observations of its gap / k), by "
    "backend and model; rate(_count) / rate(_sum) is the decode speed in tokens/s.",
    lambda counts: counts.inter_token_s,
)


def _tokens(rows: _Rows) -> Metric:
    family = CounterMetricFamily(
        "gitops_llm_tokens", "LLM tokens of finished requests, by backend, model and direction (prompt, completion), "
        "as the engine counted them (the answers' usage).", labels=["backend", "model", "direction"],
    )
    for backend, model, counts in rows:
        family.add_metric([backend, model, "prompt"], counts.prompt_tokens)
        family.add_metric([backend, model, "completion"], counts.completion_tokens)
    return family


def _requests(rows: _Rows) -> Metric:
    family = CounterMetricFamily(
        "gitops_llm_requests", "LLM generation requests at the engine, by backend, model and result (finished; "
        "refused: the engine refused the prompt; cancelled: the client left, or the engine failed).",
        labels=["backend", "model", "result"],
    )
    for backend, model, counts in rows:
        for result, value in (("finished", counts.finished), ("refused", counts.refused),
                              ("cancelled", counts.cancelled)):
            family.add_metric([backend, model, result], value)
    return family


def register_token_metrics(
    registry: CollectorRegistry, cache_dir: str | None, serving: Callable[[], set[str] | None] = lambda: None
) -> None:
    """The four families in `registry`, read from `cache_dir`'s file (None: the node's default cache);
    `serving()`: the backends the proxy serves (None: not known yet, every backend in the file)."""
    path = Path(cache_dir or os.path.join(tempfile.gettempdir(), CACHE_DIR_NAME)) / TOKEN_STATS_FILE

    def read() -> _Rows:
        try:
            counts = NodeTokenCounts.from_json(path.read_text())
        except OSError:
            return []
        backends = serving()
        return [
            (backend, model, tokens)
            for backend, models in sorted(counts.backends.items()) if backends is None or backend in backends
            for model, tokens in sorted(models.items())
        ]

    for build, labels in (
        (_ttft, ("backend", "model")), (_inter_token, ("backend", "model")),
        (_tokens, ("backend", "model", "direction")), (_requests, ("backend", "model", "result")),
    ):
        registry.register(_Family(build, labels, read))
