"""Token metrics per model, measured at the engine: time to first token, time between
tokens, tokens per second, tokens in and out, requests finished, refused and cancelled.

`TokenStats.start(model)` gives a `Timing` for one request; the OpenAI layer
calls `token(n)` for each delta the engine yields and `done(usage)`,
`refused()` or `cancelled()` at its end. The clock is given (`time.perf_counter` in a
replica, a fake in tests), so this module stays pure. `snapshot()` is what
`GET .../stats` answers; `counts()` what goes to Prometheus (per model, with
histograms of time to first token and between tokens:
`vocabulary.replicas.token_counts`, published by `ray_gitops.llm.publishing`).
Inter-token gaps are the gaps between the engine's deltas divided by the
tokens a delta holds (a delta of k tokens is k observations).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ray_gitops.llm.engine import Usage
from vocabulary.replicas.token_counts import ModelTokens

__all__ = ["TokenStats", "Timing"]


@dataclass
class _Series:
    count: int = 0
    total: float = 0.0
    largest: float = 0.0

    def add(self, value: float, weight: int = 1) -> None:
        self.count += weight
        self.total += value * weight
        self.largest = max(self.largest, value)

    def summary(self) -> dict[str, float]:
        return {"count": self.count, "mean": self.total / self.count if self.count else 0.0, "max": self.largest}


@dataclass
class _ModelStats:
    counts: ModelTokens = field(default_factory=ModelTokens)  # what Prometheus gets (through the node's file)
    running: int = 0
    decode_s: float = 0.0  # first token to last, summed over requests
    ttft_s: _Series = field(default_factory=_Series)
    inter_token_s: _Series = field(default_factory=_Series)

    def snapshot(self) -> dict[str, Any]:
        counts = self.counts
        return {
            "requests": counts.finished, "cancelled": counts.cancelled, "refused": counts.refused,
            "running": self.running, "prompt_tokens": counts.prompt_tokens, "completion_tokens": counts.completion_tokens,
            "ttft_s": self.ttft_s.summary(), "inter_token_s": self.inter_token_s.summary(),
            # decode speed: tokens after the first over the time they took
            "tokens_per_s": (counts.completion_tokens - self.ttft_s.count) / self.decode_s if self.decode_s > 0 else 0.0,
        }


class Timing:
    """One request's clock, from its start at the engine."""

    def __init__(self, stats: _ModelStats, clock: Callable[[], float]) -> None:
        self._stats, self._clock = stats, clock
        self._start = self._last = clock()
        self._first: float | None = None
        self._open = True
        stats.running += 1

    def token(self, count: int) -> None:
        """A delta of `count` tokens came out of the engine."""
        if count <= 0:
            return
        now = self._clock()
        if self._first is None:
            self._first = now
            self._stats.ttft_s.add(now - self._start)
            self._stats.counts.ttft_s.observe(now - self._start)
            count -= 1
        if count > 0:
            self._stats.inter_token_s.add((now - self._last) / count, count)
            self._stats.counts.inter_token_s.observe((now - self._last) / count, count)
        self._last = now

    def done(self, usage: Usage) -> None:
        self._close()
        self._stats.counts.finished += 1
        self._stats.counts.prompt_tokens += usage.prompt_tokens
        self._stats.counts.completion_tokens += usage.completion_tokens
        if self._first is not None:
            self._stats.decode_s += self._last - self._first

    def refused(self) -> None:
        """The engine refused the request before generating (a prompt longer than its context)."""
        if self._open:
            self._close()
            self._stats.counts.refused += 1

    def cancelled(self) -> None:
        """The request ended unfinished: its client went away, or it failed."""
        if self._open:
            self._close()
            self._stats.counts.cancelled += 1

    def _close(self) -> None:
        if self._open:
            self._open = False
            self._stats.running -= 1


class TokenStats:
    """Every served model's token metrics."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._models: dict[str, _ModelStats] = {}

    def start(self, model: str) -> Timing:
        return Timing(self._models.setdefault(model, _ModelStats()), self._clock)

    def running(self) -> int:
        return sum(m.running for m in self._models.values())

    def counts(self) -> dict[str, ModelTokens]:
        """Every model's counts so far, copied: what a replica adds to its node's file (less what it added before)."""
        return {name: stats.counts.copy() for name, stats in self._models.items()}

    def snapshot(self) -> dict[str, Any]:
        return {"models": {name: stats.snapshot() for name, stats in sorted(self._models.items())}}
