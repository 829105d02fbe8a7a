"""The CPU engine: a word n-gram (Markov) language model, trained when the replica starts.

Not a transformer: a real small transformer's weights could not be had on the
machines this project is built and tested on (no GPU, and no model hub: only
the package registries), so the engine that serves real tokens without a GPU
is this one, honestly named. It is a language model all the same: it counts
which token follows each context of up to `order - 1` tokens in its training
text (the `[models.NAME]` file, or every `.txt` and `.md` file of a directory;
without a model, the text bundled with ray-gitops) and samples the next token
from those counts, backing off to shorter contexts, under `temperature`,
`top_p` and `seed`. Tokens are words and punctuation marks; a chat is rendered
as `role: content` lines followed by `assistant:`.

It implements `ray_gitops.llm.engine.Engine` and `Embedder` (hashed
bag-of-words vectors, unit length): the OpenAI layer cannot tell it from
vLLM. It is an `AdapterEngine` too: a LoRA adapter here is a text (a
`[models.NAME]` file or directory, as the base's) whose n-gram counts are
added to the base model's, `ADAPTER_SCALE` times over, wherever it knows a
context (`AdaptedModel`: the base's weights plus a delta, as a LoRA's
`W + BA`); so an adapter's text changes the engine's output, deterministically
at temperature 0, and loading one trains only the adapter, never the base.
Generation yields to the event loop after every token, so concurrent
requests interleave and a cancelled request stops at its next token;
`aborted` lists the requests closed before they finished.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
import re
from collections import Counter, defaultdict
from importlib import resources
from pathlib import Path
from typing import Any, AsyncGenerator, Mapping, Sequence

from ray_gitops.llm.engine import Delta, Embedded, EngineRefused, Prompt, SamplingParams, Usage

__all__ = [
    "NgramModel", "AdaptedModel", "NgramEngine", "tokenize", "detokenize", "training_text", "EMBEDDING_DIMENSIONS",
    "ADAPTER_SCALE",
]

_TOKEN = re.compile(r"[A-Za-z0-9_'’-]+|[^\sA-Za-z0-9_'’-]")
_NO_SPACE_BEFORE = frozenset(".,;:!?)]}%")
_NO_SPACE_AFTER = frozenset("([{")
EMBEDDING_DIMENSIONS = 64
DEFAULT_MAX_MODEL_LEN = 4096
# How much an adapter's counts weigh against the base model's where both know a context.
ADAPTER_SCALE = 100


def tokenize(text: str) -> list[str]:
    """Words (letters, digits, apostrophes, hyphens) and single punctuation marks."""
    return _TOKEN.findall(text)


def detokenize(previous: str | None, token: str) -> str:
    """`token` as it is appended after the token `previous` (None: the first one)."""
    if previous is None or token in _NO_SPACE_BEFORE or previous in _NO_SPACE_AFTER:
        return token
    return " " + token


def training_text(path: str | None) -> str:
    """The text at `path` (a file, or a directory's .txt and .md files in path order), else the bundled one."""
    if path is None:
        return resources.files("ray_gitops.llm").joinpath("corpus.txt").read_text(encoding="utf-8")
    root = Path(path)
    if root.is_file():
        return root.read_text(encoding="utf-8", errors="replace")
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".txt", ".md"))
    if not files:
        raise ValueError(f"{path}: no .txt or .md file to train the ngram engine on")
    return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in files)


class NgramModel:
    """Next-token counts for every context of 0 to `order - 1` tokens of a text."""

    def __init__(self, text: str, order: int = 3) -> None:
        if not 1 <= order <= 8:
            raise ValueError(f"ngram order must be 1 to 8 (got {order})")
        tokens = tokenize(text)
        if len(tokens) < order:
            raise ValueError(f"the training text has {len(tokens)} tokens: too few for order {order}")
        self.order = order
        self.vocabulary = frozenset(tokens)
        counts: dict[tuple[str, ...], Counter[str]] = defaultdict(Counter)
        for end in range(len(tokens)):
            for size in range(order):
                if end - size < 0:
                    break
                counts[tuple(tokens[end - size:end])][tokens[end]] += 1
        # each context's followers, most frequent first (ties by token: one order everywhere)
        self._followers = {
            context: sorted(counter.items(), key=lambda item: (-item[1], item[0])) for context, counter in counts.items()
        }

    def followers(self, context: Sequence[str]) -> list[tuple[str, int]]:
        """What follows the longest known suffix of `context` (at most order - 1 tokens), with counts."""
        for size in range(min(self.order - 1, len(context)), -1, -1):
            found = self._followers.get(tuple(context[len(context) - size:]))
            if found:
                return found
        return self._followers[()]

    def known(self, context: tuple[str, ...]) -> list[tuple[str, int]] | None:
        """The followers of exactly `context`, or None."""
        return self._followers.get(context)

    def sample(self, context: Sequence[str], temperature: float, top_p: float, rng: random.Random) -> str:
        return _sample(self.followers(context), temperature, top_p, rng)


class AdaptedModel:
    """A base model with an adapter's counts added (`ADAPTER_SCALE` times) at each context either knows:
    the longest suffix of the context that the base or the adapter knows decides, as in `NgramModel`."""

    def __init__(self, base: NgramModel, adapter: NgramModel, scale: int = ADAPTER_SCALE) -> None:
        self.base, self.adapter, self.scale = base, adapter, scale

    def followers(self, context: Sequence[str]) -> list[tuple[str, int]]:
        for size in range(min(self.base.order - 1, len(context)), -1, -1):
            suffix = tuple(context[len(context) - size:])
            base, delta = self.base.known(suffix), self.adapter.known(suffix)
            if not delta:
                if base:
                    return base
                continue
            merged: dict[str, int] = dict(base or ())
            for token, count in delta:
                merged[token] = merged.get(token, 0) + count * self.scale
            return sorted(merged.items(), key=lambda item: (-item[1], item[0]))
        return self.base.followers(())

    def sample(self, context: Sequence[str], temperature: float, top_p: float, rng: random.Random) -> str:
        return _sample(self.followers(context), temperature, top_p, rng)


def _sample(followers: list[tuple[str, int]], temperature: float, top_p: float, rng: random.Random) -> str:
    if temperature == 0:
        return followers[0][0]
    weights = [count ** (1.0 / temperature) for _, count in followers]
    if top_p < 1.0:
        total, kept, running = sum(weights), 0, 0.0
        while kept < len(weights) and running < top_p * total:
            running += weights[kept]
            kept += 1
        followers, weights = followers[:kept], weights[:kept]
    return rng.choices([token for token, _ in followers], weights=weights)[0]


def _chat_tokens(messages: Sequence[Mapping[str, str]]) -> list[str]:
    tokens: list[str] = []
    for message in messages:
        tokens += [message["role"], ":", *tokenize(message["content"])]
    return tokens + ["assistant", ":"]


class NgramEngine:
    """`Engine` and `Embedder` over an `NgramModel`."""

    def __init__(
        self, text: str, name: str, *, order: int = 3, max_model_len: int | None = None, seed: int | None = None
    ) -> None:
        self.model = NgramModel(text, order)
        self.name = name
        self.max_model_len = max_model_len or DEFAULT_MAX_MODEL_LEN
        self._seed = seed
        self._order = order
        self._adapters: dict[str, NgramModel] = {}
        self.aborted: list[str] = []

    @classmethod
    def from_args(cls, path: str | None, name: str, max_model_len: int | None, engine_args: Mapping[str, Any]) -> NgramEngine:
        unknown = set(engine_args) - {"order", "seed"}
        if unknown:
            raise ValueError(f"ngram: unknown engine_args {sorted(unknown)} (known: order, seed)")
        return cls(training_text(path), name, max_model_len=max_model_len, **engine_args)

    def models(self) -> Sequence[str]:
        return [self.name]

    async def load_adapter(self, name: str, path: str) -> None:
        """Train the adapter's counts on the text at `path` (in a thread: the engine keeps serving)."""
        text = await asyncio.to_thread(training_text, path)
        self._adapters[name] = await asyncio.to_thread(NgramModel, text, self._order)

    async def unload_adapter(self, name: str) -> None:
        self._adapters.pop(name, None)

    def adapters(self) -> Sequence[str]:
        return list(self._adapters)

    async def generate(
        self, prompt: Prompt, params: SamplingParams, request_id: str, adapter: str | None = None
    ) -> AsyncGenerator[Delta, None]:
        model: NgramModel | AdaptedModel = self.model
        if adapter is not None:
            delta = self._adapters.get(adapter)
            if delta is None:
                raise EngineRefused(f"the adapter `{adapter}` is not loaded", "model_not_found", "model")
            model = AdaptedModel(self.model, delta)
        tokens = _chat_tokens(prompt.messages) if prompt.messages is not None else tokenize(prompt.text or "")
        if len(tokens) + params.max_tokens > self.max_model_len:
            raise EngineRefused(
                f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                f"{len(tokens) + params.max_tokens} tokens ({len(tokens)} in the messages, {params.max_tokens} in "
                "the completion). Please reduce the length of the messages or completion.",
                "context_length_exceeded", "messages" if prompt.messages is not None else "prompt",
            )
        seed = params.seed if params.seed is not None else self._seed
        rng = random.Random(seed if seed is not None else request_id)
        # a completion continues its prompt's text (a space before a word); a chat's answer starts afresh
        previous = tokens[-1] if prompt.messages is None and tokens else None
        context, text, produced = list(tokens), "", 0
        finished = False
        try:
            while produced < params.max_tokens:
                token = model.sample(context, params.temperature, params.top_p, rng)
                piece = detokenize(previous, token)
                produced += 1
                stop = _stop_at(text + piece, len(text), params.stop)
                if stop is not None:
                    finished = True
                    yield Delta(stop[len(text):], 1, "stop", Usage(len(tokens), produced))
                    return
                text += piece
                context.append(token)
                previous = token
                last = produced == params.max_tokens
                finished = last
                yield Delta(piece, 1, "length" if last else None, Usage(len(tokens), produced) if last else None)
                await asyncio.sleep(0)  # other requests' tokens, and a cancellation, get their turn
        finally:
            if not finished:
                self.aborted.append(request_id)

    async def embed(self, texts: Sequence[str]) -> Embedded:
        vectors, count = [], 0
        for text in texts:
            tokens = tokenize(text.lower())
            if len(tokens) > self.max_model_len:
                raise EngineRefused(f"an input has {len(tokens)} tokens, more than {self.max_model_len}",
                                    "context_length_exceeded", "input")
            count += len(tokens)
            vector = [0.0] * EMBEDDING_DIMENSIONS
            for token in tokens:
                digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
                vector[digest[0] % EMBEDDING_DIMENSIONS] += 1.0 if digest[1] & 1 else -1.0
            norm = math.sqrt(sum(v * v for v in vector)) or 1.0
            vectors.append(tuple(v / norm for v in vector))
        return Embedded(tuple(vectors), count)


def _stop_at(text: str, searched_from: int, stops: Sequence[str]) -> str | None:
    """`text` cut before the first stop string that ends past `searched_from`, or None."""
    cut = None
    for stop in stops:
        found = text.find(stop, max(0, searched_from - len(stop) + 1))
        if found != -1 and (cut is None or found < cut):
            cut = found
    return None if cut is None else text[:cut]
