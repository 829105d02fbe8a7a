"""Which replica of a backend takes a request: the routing policies of `[backends.X.routing]`.

Each policy is a small object behind one interface, `Policy`: it is told the
replica set when it changes (`members`) and then, per request, chooses an
index from the replicas' in-flight counts, the cap (`max_concurrent_queries`)
and the request's key (bytes, or None when the request carries none). It
never returns a replica at the cap; None means every replica is full.

- `power_of_two` is `vocabulary.request_path.choosing.pick_replica` itself; the pool calls
  it directly (no policy object), so today's hot path is unchanged.
- `round_robin`: each replica in turn, skipping full ones.
- `least_loaded`: the fewest in flight (ties broken from a random start); once
  every replica has reported a load (`ray_gitops.serving.report_load`), the
  lowest reported load below the cap.
- `consistent_hash`: rendezvous (highest random weight) hashing of the key
  over replica ids: a key stays on one replica while the set is stable, and
  when a replica joins or leaves only the keys it wins or held move (~1/N).
  A full replica passes the request to the key's next replica in rank.
- `prefix_affinity`: as SGLang's cache-aware router, requests sharing a
  prefix (the first `prefix_bytes` of the key) go to one replica unless it
  is overloaded: its in-flight count exceeds `max_imbalance` × the least
  loaded replica's (counted as at least 1), when the least loaded takes it
  (once every replica reports a load: the one reporting the lowest).
  The prefix is cut into blocks whose chained hashes (the hash of all
  bytes up to each block's end) are remembered (an LRU
  table bounded at `_TABLE_ENTRIES` per backend) with the replica that last
  took them; a request goes to the replica of its longest remembered block
  chain. A prefix sharing not even its first block with any remembered one
  is new and goes to the least loaded replica, ties broken by the prefix's
  rendezvous rank, so idle proxy workers (each learns its own table) agree
  where it starts.

A request without a key is routed by power_of_two. Pure: numbers and bytes
in, an index out; the randomness is injected.
"""

from __future__ import annotations

import collections
import hashlib
from typing import Protocol, Sequence

from vocabulary.request_path.choosing import Random, pick_replica
from vocabulary.spec.routing import RoutingConfig, RoutingPolicy

__all__ = [
    "Policy",
    "RoundRobin",
    "LeastLoaded",
    "ConsistentHash",
    "PrefixAffinity",
    "policy_for",
    "rendezvous_rank",
]

_MASK = (1 << 64) - 1
# Remembered prefix blocks per backend: ~100 bytes each, so a few MB at most.
_TABLE_ENTRIES = 16_384
# A prefix is cut into at most this many blocks (each at least _MIN_BLOCK bytes).
_MAX_BLOCKS = 16
_MIN_BLOCK = 64  # a shared prefix shorter than this (JSON's own '[{"role":' ...) is no prefix


class Policy(Protocol):
    def members(self, replica_ids: Sequence[str]) -> None:
        """The replica set changed: these ids, in the order of later `in_flight` lists."""

    def choose(
        self, in_flight: Sequence[int], cap: int, key: bytes | None, rng: Random,
        loads: Sequence[float] | None = None,
    ) -> int | None:
        """The index of the replica that takes the request; None: all are at `cap`.
        `loads`: what every replica last reported (`ray_gitops.serving.report_load`),
        or None while one has not."""


def _digest64(data: bytes) -> int:
    """A stable 64-bit hash (the same in every process, unlike `hash`)."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def _mix(value: int) -> int:
    """splitmix64's finaliser: a cheap, well-spread 64-bit mix."""
    value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    value = (value ^ (value >> 27)) * 0x94D049BB133111EB & _MASK
    return value ^ (value >> 31)


def rendezvous_rank(key_hash: int, replica_hashes: Sequence[int]) -> list[int]:
    """Replica indexes from the key's favourite to its least favourite."""
    scores = [_mix(key_hash ^ h) for h in replica_hashes]
    return sorted(range(len(scores)), key=scores.__getitem__, reverse=True)


def _rendezvous_pick(key_hash: int, replica_hashes: Sequence[int], in_flight: Sequence[int], cap: int) -> int | None:
    best = -1
    best_score = -1
    for index, replica_hash in enumerate(replica_hashes):
        score = _mix(key_hash ^ replica_hash)
        if score > best_score:
            best, best_score = index, score
    if best < 0:
        return None
    if in_flight[best] < cap:
        return best
    for index in rendezvous_rank(key_hash, replica_hashes):
        if in_flight[index] < cap:
            return index
    return None


def _least_by_rank(in_flight: Sequence[int], key_hash: int, replica_hashes: Sequence[int]) -> int:
    """The least loaded replica; among equals, the key's rendezvous favourite."""
    fewest = min(in_flight)
    best, best_score = 0, -1
    for index, replica_hash in enumerate(replica_hashes):
        if in_flight[index] == fewest:
            score = _mix(key_hash ^ replica_hash)
            if score > best_score:
                best, best_score = index, score
    return best


def _least_reported(in_flight: Sequence[int], cap: int, loads: Sequence[float], start: int) -> int | None:
    """The replica below `cap` with the lowest reported load (then fewest in flight),
    scanning from `start` so ties fall anywhere; None: all are at `cap`."""
    count = len(in_flight)
    best: int | None = None
    for step in range(count):
        index = (start + step) % count
        if in_flight[index] >= cap:
            continue
        if best is None or (loads[index], in_flight[index]) < (loads[best], in_flight[best]):
            best = index
    return best


def _least(in_flight: Sequence[int], start: int) -> int:
    count = len(in_flight)
    best = start
    for step in range(1, count):
        index = (start + step) % count
        if in_flight[index] < in_flight[best]:
            best = index
    return best


class RoundRobin:
    def __init__(self) -> None:
        self._next = 0

    def members(self, replica_ids: Sequence[str]) -> None:
        pass

    def choose(
        self, in_flight: Sequence[int], cap: int, key: bytes | None, rng: Random,
        loads: Sequence[float] | None = None,
    ) -> int | None:
        count = len(in_flight)
        for step in range(count):
            index = (self._next + step) % count
            if in_flight[index] < cap:
                self._next = index + 1
                return index
        return None


class LeastLoaded:
    def members(self, replica_ids: Sequence[str]) -> None:
        pass

    def choose(
        self, in_flight: Sequence[int], cap: int, key: bytes | None, rng: Random,
        loads: Sequence[float] | None = None,
    ) -> int | None:
        if not in_flight:
            return None
        if loads is None:
            best = _least(in_flight, rng.randrange(len(in_flight)))
            return best if in_flight[best] < cap else None
        return _least_reported(in_flight, cap, loads, rng.randrange(len(in_flight)))


class ConsistentHash:
    def __init__(self) -> None:
        self._hashes: tuple[int, ...] = ()

    def members(self, replica_ids: Sequence[str]) -> None:
        self._hashes = tuple(_digest64(replica_id.encode()) for replica_id in replica_ids)

    def choose(
        self, in_flight: Sequence[int], cap: int, key: bytes | None, rng: Random,
        loads: Sequence[float] | None = None,
    ) -> int | None:
        if key is None:
            return pick_replica(in_flight, cap, rng)
        return _rendezvous_pick(_digest64(key), self._hashes, in_flight, cap)


class PrefixAffinity:
    def __init__(self, prefix_bytes: int, max_imbalance: float, table_entries: int = _TABLE_ENTRIES) -> None:
        self._prefix_bytes = prefix_bytes
        self._block = max(_MIN_BLOCK, -(-prefix_bytes // _MAX_BLOCKS))
        self._max_imbalance = max_imbalance
        self._entries = table_entries
        self._ids: tuple[str, ...] = ()
        self._hashes: tuple[int, ...] = ()
        # chained block hash -> the replica id that last took a request with that block
        self._table: collections.OrderedDict[int, str] = collections.OrderedDict()

    def members(self, replica_ids: Sequence[str]) -> None:
        self._ids = tuple(replica_ids)
        self._hashes = tuple(_digest64(replica_id.encode()) for replica_id in replica_ids)

    def table_size(self) -> int:
        return len(self._table)

    def choose(
        self, in_flight: Sequence[int], cap: int, key: bytes | None, rng: Random,
        loads: Sequence[float] | None = None,
    ) -> int | None:
        if key is None or not in_flight:
            return pick_replica(in_flight, cap, rng)
        prefix = key[: self._prefix_bytes]
        block = self._block
        # The chain of blocks: each block hashed with the hash before it (in C), so
        # a block's entry stands for the whole prefix up to it, and each byte is
        # hashed once (hashing each whole prefix hashed ~8x the bytes at 16 blocks).
        chain = []
        running = 0
        for end in range(block, len(prefix) + block, block):
            running = hash((running, prefix[end - block : end]))
            chain.append(running)
        start = rng.randrange(len(in_flight))
        least = _least(in_flight, start) if loads is None else _least_reported(in_flight, cap, loads, start)
        if least is None:
            return None
        preferred = self._remembered(chain)
        if preferred is None:
            # A new prefix: the least loaded replica, ties broken by the prefix's
            # rendezvous rank (so idle workers agree where a conversation starts).
            preferred = _least_by_rank(in_flight, _digest64(prefix), self._hashes)
        chosen = preferred
        if in_flight[preferred] >= cap or self._overloaded(preferred, least, in_flight, loads):
            chosen = least
        if in_flight[chosen] >= cap:
            return None
        self._remember(chain, self._ids[chosen])
        return chosen

    def _overloaded(
        self, preferred: int, least: int, in_flight: Sequence[int], loads: Sequence[float] | None
    ) -> bool:
        """Its in-flight count above max_imbalance x the least loaded's (at least 1).
        Reported loads choose who takes over (`least`), never whether to leave: a
        report is a snapshot from the replica's last answer, and a stale 0.1
        against a 0 would move conversations off warm caches."""
        return in_flight[preferred] > self._max_imbalance * max(in_flight[least], 1)

    def _remembered(self, chain: list[int]) -> int | None:
        """The replica of the longest remembered block chain; None: a new prefix."""
        table = self._table
        for block_hash in reversed(chain):
            replica_id = table.get(block_hash)
            if replica_id is not None:
                try:
                    return self._ids.index(replica_id)
                except ValueError:
                    continue  # that replica has left; a shorter block may know another
        return None

    def _remember(self, chain: list[int], replica_id: str) -> None:
        table = self._table
        for block_hash in chain:
            table[block_hash] = replica_id
            table.move_to_end(block_hash)
        while len(table) > self._entries:
            table.popitem(last=False)


def policy_for(config: RoutingConfig | None) -> Policy | None:
    """The policy object for a backend's routing; None: power_of_two (`pick_replica`)."""
    if config is None or config.policy is RoutingPolicy.POWER_OF_TWO:
        return None
    if config.policy is RoutingPolicy.ROUND_ROBIN:
        return RoundRobin()
    if config.policy is RoutingPolicy.LEAST_LOADED:
        return LeastLoaded()
    if config.policy is RoutingPolicy.CONSISTENT_HASH:
        return ConsistentHash()
    return PrefixAffinity(config.prefix_bytes, config.max_imbalance)
