"""LLM token metrics from the engine to a scrape, in-process: the built-in OpenAI backend
(ray_gitops.llm.app) with the replica host's sink installed publishes its counts (at the
latest when it drains) to the node's file (replica.token_stats_file), which the proxy's metrics read at a scrape
(proxy.observability.token_metrics): exact series per backend and model, replicas of
one node summed, a backend no longer served left out, no file no series."""

from __future__ import annotations

import asyncio
import functools
import os
import stat
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ray_gitops.llm.app import OpenAIBackend
from ray_gitops.registry import REPORTED_LOAD, install_token_sink
from proxy.observability.metrics import ProxyMetrics
from replica.token_stats_file import add_token_counts
from vocabulary.replicas.token_counts import TOKEN_STATS_FILE, ModelTokens

pytestmark = pytest.mark.component


def samples(metrics: ProxyMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every llm sample of a scrape: (name, sorted labels) -> value."""
    text = metrics.render().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text) if family.name.startswith("gitops_llm_")
        for s in family.samples
    }


def value(metrics: ProxyMetrics, name: str, **labels: str) -> float | None:
    return samples(metrics).get((name, tuple(sorted(labels.items()))))


def test_an_openai_backend_s_requests_reach_the_scrape_per_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setattr("ray_gitops.registry._installed", {})  # what the replica host installs, restored after
    monkeypatch.setattr(REPORTED_LOAD, "value", REPORTED_LOAD.value)  # the load the app reports, restored after
    install_token_sink(functools.partial(add_token_counts, str(cache), "chat"))
    backend = OpenAIBackend({"engine": "ngram", "served_model_name": "tiny"})
    metrics = ProxyMetrics(model_cache_dir=str(cache))
    assert samples(metrics) == {}  # no request yet: no file, no series

    async def run() -> None:
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=backend), base_url="http://test")
        api = openai.AsyncOpenAI(base_url="http://test/v1", api_key="unused", http_client=http, max_retries=0)
        for _ in range(2):
            await api.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "the model"}],
                                              max_tokens=6, temperature=0)
        stream = await api.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "the"}],
                                                   max_tokens=4, temperature=0, stream=True)
        assert len([chunk async for chunk in stream]) > 4
        with pytest.raises(openai.BadRequestError):  # longer than the context: the engine refuses it
            await api.completions.create(model="tiny", prompt="the " * 5000, max_tokens=4)
        # The replica drains at once, before its publisher's second is up: what it has not
        # published yet goes before it stops.
        messages = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])
        sent: list[str] = []

        async def receive() -> dict:
            return next(messages)

        async def send(message: dict) -> None:
            sent.append(message["type"])

        await backend({"type": "lifespan"}, receive, send)
        assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]

    asyncio.run(run())
    finished = dict(backend="chat", model="tiny")
    assert value(metrics, "gitops_llm_requests_total", **finished, result="finished") == 3
    assert value(metrics, "gitops_llm_requests_total", **finished, result="cancelled") == 0
    assert value(metrics, "gitops_llm_tokens_total", **finished, direction="completion") == 6 + 6 + 4
    assert value(metrics, "gitops_llm_time_to_first_token_seconds_count", **finished) == 3
    assert value(metrics, "gitops_llm_time_to_first_token_seconds_bucket", **finished, le="+Inf") == 3
    assert value(metrics, "gitops_llm_inter_token_seconds_count", **finished) == 5 + 5 + 3  # after each first
    assert (value(metrics, "gitops_llm_inter_token_seconds_sum", **finished) or 0) > 0
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700  # made private, as the model cache is


def test_the_node_s_replicas_are_summed_and_a_backend_no_longer_served_is_left_out(tmp_path: Path) -> None:
    cache = str(tmp_path)
    add_token_counts(cache, "chat", {"base": ModelTokens(prompt_tokens=10, completion_tokens=3, finished=1)})
    add_token_counts(cache, "chat", {"base": ModelTokens(prompt_tokens=5, completion_tokens=2, finished=1),
                                     "sql-lora": ModelTokens(cancelled=1)})  # another replica of the node
    add_token_counts(cache, "gone", {"base": ModelTokens(finished=7)})
    metrics = ProxyMetrics(model_cache_dir=cache)
    assert value(metrics, "gitops_llm_tokens_total", backend="chat", model="base", direction="prompt") == 15
    assert value(metrics, "gitops_llm_requests_total", backend="chat", model="base", result="finished") == 2
    assert value(metrics, "gitops_llm_requests_total", backend="chat", model="sql-lora", result="cancelled") == 1
    assert value(metrics, "gitops_llm_requests_total", backend="gone", model="base", result="finished") == 7
    metrics.retain(["chat"], ["chat"])  # 'gone' was deleted from the spec
    assert {dict(labels)["backend"] for _, labels in samples(metrics)} == {"chat"}
    assert (tmp_path / TOKEN_STATS_FILE).exists() and not list(tmp_path.glob("*.tmp"))


def test_an_unreadable_file_is_no_series_not_a_failed_scrape(tmp_path: Path) -> None:
    (tmp_path / TOKEN_STATS_FILE).write_text("{half a file")
    assert samples(ProxyMetrics(model_cache_dir=str(tmp_path))) == {}
