"""The token buckets one node's proxy workers share: a fixed table in a memory-mapped file.

A node's proxy workers are separate processes behind one port
(SO_REUSEPORT): a tenant's connections may reach any of them. For the
tenant's limit (its request rate, and its token budget: `take` many tokens at
once, `charge` the difference once the answer says how many it used) to hold per node, its bucket is one slot of a table the
workers share: `rate_buckets.bin` in the node's shared directory (the
per-node, 0700 directory the workers' metrics live in), `_SLOTS` slots of 24
bytes (the slot id, tokens, the time of the last update on the system-wide
monotonic clock), 1.5 MiB, mapped by every worker. A request's
read-refill-take-write runs under an exclusive `flock` on the file (two
system calls, microseconds), so no two workers spend the same token.

A slot id lives at `id % _SLOTS` or one of the `_PROBES` slots after it;
when all of those hold other tenants, the one idle longest is taken over
(the newcomer starts with a full bucket). With more than ~65,000 tenants
active at once on one node, some therefore get a fresh burst early.

Owns the file and its layout; the arithmetic is `proxy.routes.rate_limits.take_token`.
Without a shared directory (one worker, tests) the proxy uses
`proxy.routes.rate_limits.LocalBuckets` instead.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct

from proxy.routes.rate_limits import take_token

__all__ = ["SharedBuckets", "FILE_NAME"]

FILE_NAME = "rate_buckets.bin"
_SLOTS = 65_536
_PROBES = 8
_ENTRY = struct.Struct("<Qdd")  # slot id (0: empty), tokens, stamp


class SharedBuckets:
    def __init__(self, directory: str, slots: int = _SLOTS) -> None:
        self._slots = slots
        size = slots * _ENTRY.size
        path = os.path.join(directory, FILE_NAME)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            if os.fstat(self._fd).st_size != size:
                os.ftruncate(self._fd, size)  # new (or of another layout): all slots empty
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._map = mmap.mmap(self._fd, size)

    def take(self, slot: int, rate: float, burst: int, now: float, amount: float = 1.0) -> float:
        return self._update(slot, rate, burst, now, amount, False)

    def charge(self, slot: int, rate: float, burst: int, now: float, amount: float) -> None:
        self._update(slot, rate, burst, now, amount, True)

    def _update(self, slot: int, rate: float, burst: int, now: float, amount: float, force: bool) -> float:
        table, entry, slots = self._map, _ENTRY, self._slots
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            home = slot % slots
            chosen = -1
            oldest_at, oldest_stamp = home, float("inf")
            for probe in range(_PROBES):
                index = (home + probe) % slots
                found, tokens, stamp = entry.unpack_from(table, index * entry.size)
                if found == slot:
                    chosen = index
                    break
                if found == 0:
                    chosen, tokens, stamp = index, float(burst), now
                    break
                if stamp < oldest_stamp:
                    oldest_at, oldest_stamp = index, stamp
            if chosen < 0:
                chosen, tokens, stamp = oldest_at, float(burst), now
            tokens, wait_s = take_token(tokens, stamp, now, rate, burst, amount, force)
            entry.pack_into(table, chosen * entry.size, slot, tokens, now)
            return wait_s
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)
