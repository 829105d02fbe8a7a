"""Per-tenant request limits (`[endpoints.X.limits]`): token buckets, one per key.

The same buckets hold the tenants' LLM token budgets (`tokens_per_minute`,
`proxy.routes.token_budgets`): a budget takes many tokens at once, and is
charged or refunded afterwards (`charge`), so a bucket may go below zero.

A tenant's bucket holds up to `burst` tokens and refills at `requests_per_s`;
a request takes one token or is refused (429) with the seconds until the
next token as its `Retry-After`. The tenant's key (a header, cookie or query
parameter; `key` unset: one bucket for the endpoint) is hashed with the
endpoint's name into a 64-bit slot id at once: the key itself is never kept,
logged or put in a metric.

The key is read as the app will read it, or the request is refused: a key
that appears more than once (a query parameter, a cookie across every
`Cookie` header, a header) is ambiguous, since frameworks disagree on which
one counts (Starlette takes the last query parameter and cookie, the first
header), so it is answered 400 (`AmbiguousTenant`) rather than one bucket
charged for another's requests. An `Authorization` or
`Proxy-Authorization` key is read with its scheme in lower case and the
whitespace around and after it collapsed (`Bearer  X`, `bearer X` and
`BEARER X` are one tenant); any header's value without its surrounding
whitespace; a cookie's as Starlette unquotes it.

Owned here: the bucket arithmetic (`take_token`), the slot id (`tenant_slot`, `TenantLimit`),
the `Buckets` interface and `LocalBuckets`, one process's own table (bounded;
the least recently used bucket is forgotten, and a forgotten bucket comes
back full, as an idle one would be). A node's proxy workers share one table
instead, `proxy.shell.shared_buckets`, so a tenant gets its rate per node whichever
worker its connections reach. With N nodes running proxies (the controller
publishes N with the route table), each node enforces `node_share`: 1/N of
the rate and of the burst, so a tenant spread over the nodes gets about the
limit written. Pure: time is passed in.
"""

from __future__ import annotations

import collections
import hashlib
import math
from dataclasses import dataclass
from http.cookies import _unquote  # what Starlette's cookie_parser unquotes with
from typing import Protocol, Sequence
from urllib.parse import parse_qsl

from vocabulary.spec.endpoints import LimitsConfig
from vocabulary.spec.keys import KeyKind

__all__ = [
    "AmbiguousTenant", "Buckets", "LocalBuckets", "TenantLimit", "node_share", "take_token", "tenant_key", "tenant_slot",
]

_LOCAL_BUCKETS = 65_536


def take_token(
    tokens: float, stamp: float, now: float, rate: float, burst: int, amount: float = 1.0, force: bool = False,
) -> tuple[float, float]:
    """A bucket that had `tokens` at `stamp`, asked for `amount` at `now`: (tokens
    left, 0.0) when granted, else (tokens, seconds until `amount` is there).
    `force`: taken whatever is left (the bucket may go below zero; a negative
    `amount` gives tokens back, up to `burst`), always granted."""
    tokens = min(float(burst), tokens + max(0.0, now - stamp) * rate)
    if force or tokens >= amount:
        return min(float(burst), tokens - amount), 0.0
    return tokens, (amount - tokens) / rate


def node_share(config: LimitsConfig, nodes: int) -> tuple[float, int]:
    """One node's (rate, burst) of a request limit when `nodes` nodes' proxies enforce it: the
    rate ÷ nodes, the burst ÷ nodes rounded up (a bucket holds at least one token)."""
    assert config.requests_per_s is not None
    nodes = max(1, nodes)
    return config.requests_per_s / nodes, max(1, math.ceil(config.burst / nodes))


class Buckets(Protocol):
    def take(self, slot: int, rate: float, burst: int, now: float, amount: float = 1.0) -> float:
        """0.0: `amount` tokens were taken from bucket `slot`; else the seconds until they are there."""

    def charge(self, slot: int, rate: float, burst: int, now: float, amount: float) -> None:
        """Take `amount` from bucket `slot` whatever it holds (below zero if need be); a negative amount
        gives tokens back (up to `burst`)."""


class LocalBuckets:
    """One process's buckets, bounded at `capacity`."""

    def __init__(self, capacity: int = _LOCAL_BUCKETS) -> None:
        self._capacity = capacity
        self._buckets: collections.OrderedDict[int, tuple[float, float]] = collections.OrderedDict()

    def take(self, slot: int, rate: float, burst: int, now: float, amount: float = 1.0) -> float:
        return self._update(slot, rate, burst, now, amount, False)

    def charge(self, slot: int, rate: float, burst: int, now: float, amount: float) -> None:
        self._update(slot, rate, burst, now, amount, True)

    def _update(self, slot: int, rate: float, burst: int, now: float, amount: float, force: bool) -> float:
        tokens, stamp = self._buckets.pop(slot, (float(burst), now))
        tokens, wait_s = take_token(tokens, stamp, now, rate, burst, amount, force)
        self._buckets[slot] = (tokens, now)
        if len(self._buckets) > self._capacity:
            self._buckets.popitem(last=False)
        return wait_s


class AmbiguousTenant(ValueError):
    """The tenant key appears more than once: the request is refused (400) with this text."""


_SCHEMED = frozenset({b"authorization", b"proxy-authorization"})


def tenant_key(kind: KeyKind, name: str, query: bytes, headers: Sequence[tuple[bytes, bytes]]) -> bytes | None:
    """The tenant's key as the app reads it (see the module docstring), None when the request
    carries none; `AmbiguousTenant` when it carries it more than once."""
    found: list[bytes] = []
    if kind is KeyKind.HEADER:
        wanted = name.lower().encode("latin-1")
        found = [value.strip(b" \t") for key, value in headers if key.lower() == wanted]
        if wanted in _SCHEMED:
            found = [b" ".join(_schemed(value.split())) for value in found]
        what = f"header {name}"
    elif kind is KeyKind.COOKIE:
        for key, value in headers:
            if key.lower() == b"cookie":
                found += [_cookie(pair) for pair in value.split(b";") if _cookie_name(pair) == name]
        what = f"cookie {name}"
    else:  # KeyKind.QUERY: as Starlette's QueryParams parse it
        pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
        found = [value.encode() for key, value in pairs if key == name]
        what = f"query parameter {name}"
    if len(found) > 1:
        raise AmbiguousTenant(f"the {what} appears {len(found)} times: this endpoint's limit reads it once")
    return found[0] if found else None


def _schemed(words: list[bytes]) -> list[bytes]:
    return [words[0].lower(), *words[1:]] if words else []


def _cookie_name(pair: bytes) -> str:
    """A `Cookie` pair's name as Starlette's cookie_parser reads it (a pair without `=` has none)."""
    return pair.partition(b"=")[0].strip().decode("latin-1") if b"=" in pair else ""


def _cookie(pair: bytes) -> bytes:
    _, _, value = pair.partition(b"=")
    return str(_unquote(value.strip().decode("latin-1"))).encode("latin-1", "replace")


def tenant_slot(
    endpoint: str, source: tuple[KeyKind, str] | None, query: bytes, headers: Sequence[tuple[bytes, bytes]],
    person: bytes,
) -> int:
    """The bucket of the request's tenant: a nonzero 64-bit hash of the endpoint and the key (`person`
    keeps one tenant's buckets of different kinds apart); `AmbiguousTenant` when the request carries
    the key more than once."""
    key = None if source is None else tenant_key(*source, query, headers)
    named = endpoint.encode() + (b"\0" if key is None else b"\1" + key)
    digest = hashlib.blake2b(named, digest_size=8, person=person).digest()
    return int.from_bytes(digest, "big") or 1


@dataclass(frozen=True)
class TenantLimit:
    """An endpoint's request limit, ready for the request path."""

    endpoint: str
    rate: float
    burst: int
    source: tuple[KeyKind, str] | None

    @classmethod
    def from_config(cls, endpoint: str, config: LimitsConfig | None, nodes: int = 1) -> TenantLimit | None:
        """The limit this node's proxies enforce: its share when `nodes` nodes run proxies
        (None: no `requests_per_s`)."""
        if config is None or config.requests_per_s is None:
            return None
        rate, burst = node_share(config, nodes)
        return cls(endpoint, rate, burst, config.key_source())

    def slot(self, query: bytes, headers: Sequence[tuple[bytes, bytes]]) -> int:
        """The request bucket of the request's tenant (`tenant_slot`)."""
        return tenant_slot(self.endpoint, self.source, query, headers, b"gitops-limits")
