"""LLM token metrics as values: the engine's counts per model with their histograms
(ray_gitops.llm.token_stats), the node's file they are added to
(vocabulary.replicas.token_counts) and the publisher that hands a replica's
changes to it (ray_gitops.llm.publishing, with a sink in memory)."""

from __future__ import annotations

import asyncio

import pytest

from ray_gitops.llm.engine import Usage
from ray_gitops.llm.publishing import TokenPublisher
from ray_gitops.llm.token_stats import TokenStats
from vocabulary.replicas.token_counts import (
    MODELS_PER_BACKEND, OTHER_MODEL, TTFT_BUCKETS, Buckets, ModelTokens, NodeTokenCounts,
)


def _served(stats: TokenStats, model: str, now: list[float], ttft: float, gaps: list[tuple[float, int]]) -> None:
    """One request of `model`: first token after `ttft`, then deltas (seconds after the last, tokens)."""
    timing = stats.start(model)
    now[0] += ttft
    timing.token(1)
    for gap, tokens in gaps:
        now[0] += gap
        timing.token(tokens)
    timing.done(Usage(prompt_tokens=5, completion_tokens=1 + sum(t for _, t in gaps)))


def test_the_engine_counts_feed_histograms_a_delta_of_k_tokens_is_k_observations() -> None:
    now = [0.0]
    stats = TokenStats(lambda: now[0])
    _served(stats, "m", now, 0.03, [(0.004, 2)])  # 2 tokens in 4 ms: two gaps of 2 ms
    stats.start("m").refused()
    counts = stats.counts()["m"]
    assert (counts.prompt_tokens, counts.completion_tokens, counts.finished, counts.refused) == (5, 3, 1, 1)
    assert counts.ttft_s.cumulative()[:4] == [("0.005", 0), ("0.01", 0), ("0.025", 0), ("0.05", 1)]
    assert dict(counts.inter_token_s.cumulative())["0.0025"] == 2 and counts.inter_token_s.count() == 2
    assert counts.inter_token_s.total == pytest.approx(0.004)  # the sum: decode time, so count/sum is tokens/s
    assert stats.snapshot()["models"]["m"]["requests"] == 1  # /stats still says the same numbers
    counts.finished = 99
    assert stats.counts()["m"].finished == 1  # a copy: the publisher's diff never aliases the live counts


def test_counts_add_and_subtract_bucket_by_bucket() -> None:
    a, b = ModelTokens(prompt_tokens=3, finished=1), ModelTokens(completion_tokens=7, cancelled=2)
    a.ttft_s.observe(0.2)
    b.ttft_s.observe(40.0)  # past every bound: the +Inf bucket only
    both = a.plus(b)
    assert both.ttft_s.cumulative()[-2:] == [("30.0", 1), ("+Inf", 2)]
    assert both.minus(a).to_dict() == b.to_dict()
    assert both.minus(both).empty() and not both.empty()


def test_the_node_file_sums_replicas_per_backend_and_model_and_round_trips() -> None:
    node = NodeTokenCounts()
    node.add("chat", {"base": ModelTokens(prompt_tokens=4, finished=1)})
    node.add("chat", {"base": ModelTokens(prompt_tokens=6, finished=1), "sql-lora": ModelTokens(refused=1)})
    node.add("other-backend", {"base": ModelTokens(cancelled=1)})
    again = NodeTokenCounts.from_json(node.to_json())
    assert again.backends["chat"]["base"].prompt_tokens == 10 and again.backends["chat"]["base"].finished == 2
    assert again.backends["chat"]["sql-lora"].refused == 1 and again.backends["other-backend"]["base"].cancelled == 1


def test_past_the_cap_further_model_names_are_counted_as_other() -> None:
    node = NodeTokenCounts()
    node.add("chat", {f"m{i}": ModelTokens(finished=1) for i in range(MODELS_PER_BACKEND + 5)})
    assert len(node.backends["chat"]) == MODELS_PER_BACKEND + 1  # the first names, then 'other'
    assert node.backends["chat"][OTHER_MODEL].finished == 5
    node.add("chat", {"m0": ModelTokens(finished=1)})  # a name already kept stays itself
    assert node.backends["chat"]["m0"].finished == 2


@pytest.mark.parametrize("text", ["", "not json", "[1, 2]", '{"backends": 3}', '{"backends": {"chat": 3}}'])
def test_an_empty_or_unreadable_file_is_no_counts(text: str) -> None:
    assert NodeTokenCounts.from_json(text).backends == {}


def test_a_malformed_entry_is_left_at_zero_and_a_histogram_of_other_bounds_dropped() -> None:
    good = ModelTokens(finished=2)
    good.ttft_s.observe(0.1)
    data = good.to_dict()
    data["prompt_tokens"] = -4
    data["inter_token_s"] = {"counts": [1, 2], "sum": 0.5}  # bounds of another version
    read = ModelTokens.from_dict(data)
    assert (read.finished, read.prompt_tokens, read.ttft_s.count(), read.inter_token_s.count()) == (2, 0, 1, 0)
    assert ModelTokens.from_dict("junk").empty()
    assert Buckets(TTFT_BUCKETS, [1]).counts == [0] * (len(TTFT_BUCKETS) + 1)


def test_the_publisher_sends_what_changed_and_retries_what_the_sink_refused() -> None:
    now = [0.0]
    stats = TokenStats(lambda: now[0])
    sent: list[dict[str, ModelTokens]] = []
    failing = [True]

    def sink(models: dict[str, ModelTokens]) -> None:
        if failing[0]:
            raise OSError("disk full")
        sent.append(models)

    async def scenario() -> None:
        publisher = TokenPublisher(stats.counts, sink, delay_s=0.01)
        _served(stats, "m", now, 0.1, [])
        await publisher.publish()  # the sink fails: nothing is marked published
        failing[0] = False
        _served(stats, "m", now, 0.1, [])
        await publisher.publish()
        await publisher.publish()  # nothing changed since: nothing sent
        _served(stats, "a", now, 0.1, [])
        publisher.changed()
        publisher.changed()  # one publication for changes made within the delay
        await asyncio.sleep(0.1)

    asyncio.run(scenario())
    assert [{m: c.finished for m, c in batch.items()} for batch in sent] == [{"m": 2}, {"a": 1}]
