"""A batched text model: one call scores many texts at once.

With `[backends.NAME.batching]` the handler receives a list of requests and
returns a list of the same length, in the same order; the proxy groups the
requests that arrive together (at most `max_batch_size`, the first waiting
at most `batch_wait_timeout_s` for the others). Vectorised work — a model's
forward pass over a padded batch — is then paid once per batch. Here the
"model" counts vowels over the whole batch at once; each answer also says
how many requests shared its call, which is what the batching test reads.
"""

from __future__ import annotations

from starlette.requests import Request

_VOWELS = frozenset("aeiou")


class VowelModel:
    async def __call__(self, requests: list[Request]) -> list[dict[str, int]]:
        texts = [(await request.body()).decode("utf-8", errors="replace").lower() for request in requests]
        scores = self.score(texts)
        return [{"vowels": score, "batch_size": len(texts)} for score in scores]

    @staticmethod
    def score(texts: list[str]) -> list[int]:
        """The batched forward pass: every text of the batch in one go."""
        return [sum(char in _VOWELS for char in text) for text in texts]
