"""Which replica of a multiplexed backend takes a model's request, and how hot its hottest model is.

The same routing serves an [llm] backend's LoRA adapters, the model read from
the JSON body's `model` (`proxy.pool.replicas`).

A multiplexed backend (`[backends.X.multiplex]`, docs/guides/models.md) keeps up to
`max_models_per_replica` models loaded on each replica; loading one is slow,
so a request for model M goes to a replica that has M loaded (each answer
tells the proxy which models its replica holds: `vocabulary.request_path.multiplexing`),
the least busy of them. It leaves them only when that replica is full (at
`max_concurrent_queries`) or overloaded: its in-flight count above
`MAX_IMBALANCE` × the least loaded replica's (counted as at least 1); then,
as for a model no replica holds, the least loaded replica takes it (ties:
the one holding the fewest models, so the fewest evictions, then the
model's rendezvous favourite, so that proxies agree). A hot model thus
spreads over more replicas only when its replicas are busy.

`hot_ongoing` is what an autoscaled multiplexed backend reports as its
in-flight load: the total, or, when larger, the in-flight count the
backend would have if every replica were as busy as the replicas holding
its hottest model, so a hot model held by one replica scales the backend
up although the others idle (ray#65691). A request without a model id is
routed by power_of_two. Pure: numbers and sets in, an index out.
"""

from __future__ import annotations

import hashlib
from typing import Collection, Sequence

from vocabulary.request_path.choosing import Random, pick_replica

__all__ = ["MAX_IMBALANCE", "ModelAffinity", "hot_ongoing"]

# Leave a model's replicas when the least busy of them has more than this many
# times the in-flight requests of the least loaded replica (at least 1).
MAX_IMBALANCE = 2.0

_MASK = (1 << 64) - 1


def _hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")


def _mix(value: int) -> int:
    value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    value = (value ^ (value >> 27)) * 0x94D049BB133111EB & _MASK
    return value ^ (value >> 31)


class ModelAffinity:
    """The routing of one multiplexed backend (one per replica pool)."""

    def __init__(self, max_imbalance: float = MAX_IMBALANCE) -> None:
        self._max_imbalance = max_imbalance
        self._hashes: tuple[int, ...] = ()

    def members(self, replica_ids: Sequence[str]) -> None:
        self._hashes = tuple(_hash64(replica_id) for replica_id in replica_ids)

    def choose(
        self, in_flight: Sequence[int], cap: int, model: str | None, rng: Random,
        loaded: Sequence[Collection[str]],
    ) -> int | None:
        """The index of the replica that takes a request for `model`; None: all are at `cap`.
        `loaded[i]`: the models replica i holds (as last reported, plus those sent since)."""
        if model is None or not in_flight:
            return pick_replica(in_flight, cap, rng)
        best: int | None = None
        for index, models in enumerate(loaded):
            if model in models and in_flight[index] < cap and (best is None or in_flight[index] < in_flight[best]):
                best = index
        least = self._least(in_flight, cap, model, loaded)
        if least is None:
            return None
        if best is not None and in_flight[best] <= self._max_imbalance * max(in_flight[least], 1):
            return best
        return least

    def _least(self, in_flight: Sequence[int], cap: int, model: str, loaded: Sequence[Collection[str]]) -> int | None:
        """The least loaded replica below `cap`: fewest in flight, then fewest models, then the model's favourite."""
        model_hash = _hash64(model)
        hashes = self._hashes if len(self._hashes) == len(in_flight) else tuple(range(len(in_flight)))
        best: int | None = None
        best_rank: tuple[int, int, int] | None = None
        for index, count in enumerate(in_flight):
            if count >= cap:
                continue
            rank = (count, len(loaded[index]), -_mix(model_hash ^ hashes[index]))
            if best_rank is None or rank < best_rank:
                best, best_rank = index, rank
        return best


def hot_ongoing(in_flight: Sequence[int], loaded: Sequence[Collection[str]]) -> int:
    """The backend's in-flight count for the autoscaler: the total, or, when larger,
    its replica count × the mean in-flight count of the replicas holding its
    busiest model (the model whose holders are busiest on average)."""
    total = sum(in_flight)
    count = len(in_flight)
    if count < 2:
        return total
    holders: dict[str, list[int]] = {}
    for index, models in enumerate(loaded):
        for model in models:
            holders.setdefault(model, []).append(in_flight[index])
    hottest = max((sum(counts) / len(counts) for counts in holders.values()), default=0.0)
    return max(total, round(hottest * count))
