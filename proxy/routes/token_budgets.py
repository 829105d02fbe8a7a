"""Per-tenant LLM token budgets (`[endpoints.X.limits] tokens_per_minute`): the arithmetic, pure.

A tenant's budget is a bucket of `proxy.routes.rate_limits` (the same
buckets, the same shared table, one more slot per tenant): it holds up to one
minute's tokens (`capacity`) and refills at `tokens_per_minute / 60` a
second, both the node's share when N nodes run proxies (÷ N, as request
limits are shared). Before a request is sent, its tokens are not known; it
is admitted on an `estimate`, taken from the bucket at once:

    prompt  = ceil(body bytes / BYTES_PER_TOKEN)   (no tokenizer at the proxy)
    reply   = the body's top-level `max_tokens` (or `max_completion_tokens`), when it says
    estimate = min(prompt + reply, capacity)       (so a full bucket admits any request)

A bucket holding less than the estimate refuses the request: 429 with the
seconds until it will hold it as `Retry-After` (`retry_after_s`) and
OpenAI's error body (`refusal_body`). Once answered, the reply's `usage`
(prompt + completion tokens; in a JSON body, or in the last server-sent
event that carries one) settles the debit: the difference is charged or
given back, so the bucket may go below zero and the tenant then waits for
the refill (`settlement`). `UsageWatch` finds the usage in a body's pieces or
a stream's chunks as they pass, keeping at most `CARRY_BYTES` between two
chunks: a stream is never held back or joined.

The tenant is the request limit's (`[limits] key`), hashed with the endpoint
into the slot; its metric label (`tenant_label`) is 8 hex digits of that
hash, never the key.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Sequence, TypeGuard

from proxy.routes.rate_limits import tenant_slot
from vocabulary.spec.endpoints import LimitsConfig
from vocabulary.spec.keys import KeyKind

__all__ = [
    "BYTES_PER_TOKEN",
    "CARRY_BYTES",
    "TokenBudget",
    "UsageWatch",
    "estimate",
    "refusal_body",
    "retry_after_s",
    "settlement",
    "tenant_label",
    "usage_total",
]

# Bytes of a request body per prompt token, without a tokenizer: OpenAI's rule of thumb for English
# text, and a JSON body's keys and punctuation make it an over-estimate, settled once `usage` is known.
BYTES_PER_TOKEN = 4
# The most of a stream kept from one chunk to the next: a `usage` object cut by a chunk boundary.
CARRY_BYTES = 4096
_USAGE = b'"usage"'
_SPACE = b" \t\r\n"
_PERSON = b"gitops-tokens"
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class TokenBudget:
    """An endpoint's token budget as this node's proxies enforce it."""

    endpoint: str
    tokens_per_minute: int  # as written: the cluster's, for the refusal's message
    rate: float  # tokens per second this node refills
    capacity: int  # the most this node's bucket holds
    source: tuple[KeyKind, str] | None

    @classmethod
    def from_config(cls, endpoint: str, config: LimitsConfig | None, nodes: int = 1) -> TokenBudget | None:
        """The budget with `nodes` nodes running proxies: each enforces 1/N of the rate and of the
        capacity (rounded up); None without `tokens_per_minute`."""
        if config is None or config.tokens_per_minute is None:
            return None
        nodes = max(1, nodes)
        per_minute = config.tokens_per_minute
        return cls(endpoint, per_minute, per_minute / 60 / nodes, max(1, math.ceil(per_minute / nodes)),
                   config.key_source())

    def slot(self, query: bytes, headers: Sequence[tuple[bytes, bytes]]) -> int:
        """The budget's bucket for the request's tenant (apart from its request bucket);
        `AmbiguousTenant` when the request carries the key more than once."""
        return tenant_slot(self.endpoint, self.source, query, headers, _PERSON)


def tenant_label(slot: int) -> str:
    """The tenant as a metric label: the top 32 bits of its slot's hash, in hex."""
    return f"{slot >> 32:08x}"


def estimate(body: bytes, capacity: int) -> int:
    """The tokens a request is admitted on: its body's bytes / `BYTES_PER_TOKEN` (rounded up) plus
    the reply it asks for (`max_tokens`, else `max_completion_tokens`, a non-negative integer at the
    top of a JSON object), at least 1 and at most `capacity`."""
    tokens = -(-len(body) // BYTES_PER_TOKEN) + _reply_tokens(body)
    return max(1, min(tokens, capacity))


def _reply_tokens(body: bytes) -> int:
    if not body.lstrip(_SPACE).startswith(b"{") or (b'"max_tokens"' not in body and b'"max_completion_tokens"' not in body):
        return 0
    try:
        parsed = json.loads(body)
    except ValueError:  # not JSON (or not UTF-8): the replica answers it, the prompt estimate stands
        return 0
    if not isinstance(parsed, dict):
        return 0
    for name in ("max_tokens", "max_completion_tokens"):
        value = parsed.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return 0


def retry_after_s(wait_s: float) -> int:
    """`Retry-After` for a bucket that holds the estimate in `wait_s` seconds: whole seconds, at least 1."""
    return max(1, math.ceil(wait_s))


def refusal_body(budget: TokenBudget, needed: int, retry_after: int) -> bytes:
    """The 429's body, in OpenAI's error shape (what OpenAI's clients read: their `RateLimitError`)."""
    message = (
        f"Rate limit reached for tokens per minute on endpoint {budget.endpoint}: limit {budget.tokens_per_minute}, "
        f"this request needs about {needed}. Please try again in {retry_after}s."
    )
    error = {"message": message, "type": "rate_limit_exceeded", "param": None, "code": "rate_limit_exceeded"}
    return json.dumps({"error": error}).encode()


def settlement(estimated: int, used: int | None, status: int, client_left: int) -> int | None:
    """What a debit of `estimated` tokens is charged once answered (negative: given back), None to
    leave it as it is. `used`: the `usage` the answer reported; without one, a failed answer
    (4xx or 5xx: no replica, a timeout, the engine's error) gives the estimate back, while a
    success, or a client that left (`client_left`, whose tokens the engine may have spent), keeps it."""
    if used is not None:
        return used - estimated
    if status >= 400 and status != client_left:
        return -estimated
    return None


def usage_total(obj: Any) -> int | None:
    """A `usage` object's tokens: `total_tokens`, else `prompt_tokens` + `completion_tokens`."""
    if not isinstance(obj, dict):
        return None
    total = obj.get("total_tokens")
    if _count(total):
        return total
    prompt, completion = obj.get("prompt_tokens", 0), obj.get("completion_tokens", 0)
    if _count(prompt) and _count(completion) and ("prompt_tokens" in obj or "completion_tokens" in obj):
        return prompt + completion
    return None


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class UsageWatch:
    """The last `usage` of a body or stream, read from its pieces as they pass (`feed`)."""

    __slots__ = ("total", "_carry")

    def __init__(self) -> None:
        self.total: int | None = None  # the tokens of the last complete `usage` seen
        self._carry = b""  # the start of a `usage` a chunk boundary cut (at most CARRY_BYTES)

    def feed(self, piece: bytes) -> None:
        text = self._carry + piece if self._carry else piece
        self._carry = b""
        end = len(text)
        while True:  # from the last `"usage"` back to the first that is a key read whole
            at = text.rfind(_USAGE, 0, end)
            if at < 0:
                break
            if self._usage_at(text, at) is _READ:
                return
            end = at  # no key, or cut by the piece's end (kept): an earlier one may be whole
        if not self._carry:  # "usage" itself cut by the boundary: keep the tail that could begin it
            quote = text.rfind(b'"', max(0, len(text) - len(_USAGE) + 1))
            if quote >= 0 and _USAGE.startswith(text[quote:]):
                self._carry = bytes(text[quote:])

    def _usage_at(self, text: bytes, at: int) -> object:
        """Read the `usage` whose key starts at `at`: `_READ` (recorded, if it counts tokens), `_CUT`
        (the piece ends inside it: kept for the next piece), or `_NOT_A_KEY`."""
        i, n = at + len(_USAGE), len(text)
        while i < n and text[i] in _SPACE:
            i += 1
        if i < n and text[i] != 0x3A:  # ':'
            return _NOT_A_KEY
        i += 1
        while i < n and text[i] in _SPACE:
            i += 1
        if i >= n:
            return self._keep(text, at)
        if text[i] != 0x7B:  # '{'
            return _NOT_A_KEY
        window = text[i : i + CARRY_BYTES].decode("utf-8", "replace")
        try:
            obj, _ = _DECODER.raw_decode(window)
        except ValueError:
            if i + CARRY_BYTES > n:  # cut by the piece's end: the rest comes with the next one
                return self._keep(text, at)
            return _NOT_A_KEY
        total = usage_total(obj)
        if total is not None:
            self.total = total
        return _READ

    def _keep(self, text: bytes, at: int) -> object:
        if not self._carry and len(text) - at <= CARRY_BYTES:
            self._carry = bytes(text[at:])
        return _CUT


_READ, _CUT, _NOT_A_KEY = object(), object(), object()
