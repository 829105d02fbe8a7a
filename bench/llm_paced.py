"""The CPU engine at a GPU's pace, for `bench.llm_endpoint`: the same engine, its first token after
`first_s` (a prefill) and each later one `token_s` after the one before.

The built-in CPU engine (`ngram`) makes ~10⁴ tokens/s, so a relay's cost per
token is most of a request's time there; a GPU model takes tens to hundreds
of milliseconds to its first token and decodes a stream at tens of tokens a
second, and that is the pace an OpenAI endpoint's clients meet.
`PacedEngine` holds back the tokens of the engine it wraps to that pace
(generation only: no embeddings, no adapters). `PacedBackend` is the
built-in `[llm]` backend (`ray_gitops.llm.app.OpenAIBackend`) over it, so
"ours" runs what a user's `[backends.X.llm]` replica runs, the engine's pace
aside; the direct server wraps its engine in `PacedEngine` itself.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncGenerator, Sequence

from ray_gitops.llm.app import OpenAIBackend
from ray_gitops.llm.engine import Delta, Engine, Prompt, SamplingParams

__all__ = ["PacedEngine", "PacedBackend"]


class PacedEngine:
    """`engine`, its first token held back `first_s`, each later one `token_s` (asyncio sleeps: other
    requests decode meanwhile)."""

    def __init__(self, engine: Engine, first_s: float, token_s: float) -> None:
        self._engine = engine
        self._first_s = first_s
        self._token_s = token_s

    def models(self) -> Sequence[str]:
        return self._engine.models()

    async def generate(self, prompt: Prompt, params: SamplingParams, request_id: str) -> AsyncGenerator[Delta, None]:
        deltas = self._engine.generate(prompt, params, request_id)
        wait = self._first_s
        try:
            async for delta in deltas:
                await asyncio.sleep(wait)
                wait = self._token_s
                yield delta
        finally:
            await deltas.aclose()


class PacedBackend(OpenAIBackend):
    """The built-in `[llm]` backend over its engine at a GPU's pace."""

    def __init__(self, llm: dict[str, Any], first_s: float, token_s: float) -> None:
        super().__init__(llm)
        self.app.engine = PacedEngine(self.app.engine, first_s, token_s)

