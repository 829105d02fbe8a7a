"""Choices on the request path: backend by weight, shadow sampling, replica, queueing.

Pure: every function takes the numbers it decides on plus an injected random
source, so tests can seed it and the proxy can use one fast generator. Not
here: the state those numbers come from (see `proxy.pool.replicas` and `replica.handles`).
"""

from __future__ import annotations

import bisect
import enum
from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence

__all__ = [
    "Random",
    "WeightedChoice",
    "ShadowSampler",
    "Admission",
    "pick_replica",
    "admit",
]


class Random(Protocol):
    """What the choices draw from: `random.Random` satisfies it, as does a seeded fake."""

    def random(self) -> float: ...

    # Positional-only, so that `random.Random.randrange(start, stop=None, step=1)` fits.
    def randrange(self, stop: int, /) -> int: ...


@dataclass(frozen=True)
class WeightedChoice:
    """Backends and their cumulative weights, ready for one draw per request."""

    names: tuple[str, ...]
    cumulative: tuple[float, ...]

    @classmethod
    def from_weights(cls, weights: Mapping[str, float]) -> WeightedChoice:
        names: list[str] = []
        cumulative: list[float] = []
        total = 0.0
        for name, weight in sorted(weights.items()):
            if weight <= 0:
                continue
            total += weight
            names.append(name)
            cumulative.append(total)
        # Normalise so rounding in the spec never leaves a gap at the top.
        return cls(tuple(names), tuple(c / total for c in cumulative) if total else ())

    def pick(self, draw: float) -> str | None:
        """The backend for a uniform draw in [0, 1); None when there is none."""
        if not self.names:
            return None
        if len(self.names) == 1:
            return self.names[0]
        index = bisect.bisect_right(self.cumulative, draw)
        return self.names[min(index, len(self.names) - 1)]


@dataclass(frozen=True)
class ShadowSampler:
    """Shadow backends with the share of requests each receives a copy of."""

    shares: tuple[tuple[str, float], ...] = ()

    @classmethod
    def from_shares(cls, shares: Mapping[str, float]) -> ShadowSampler:
        return cls(tuple((name, share) for name, share in sorted(shares.items()) if share > 0))

    def sample(self, rng: Random) -> list[str]:
        """The shadow backends this request is copied to (independent draws)."""
        return [name for name, share in self.shares if rng.random() < share]


def pick_replica(in_flight: Sequence[int], cap: int, rng: Random) -> int | None:
    """Least in-flight of two random replicas, never one at `cap`.

    When both picks are full, any replica below the cap is taken, so a free
    slot is never left idle while a request waits. None: all are full.
    """
    count = len(in_flight)
    if count == 0:
        return None
    if count == 1:
        return 0 if in_flight[0] < cap else None
    first = rng.randrange(count)
    second = rng.randrange(count - 1)
    if second >= first:
        second += 1
    best = first if in_flight[first] <= in_flight[second] else second
    if in_flight[best] < cap:
        return best
    least = min(range(count), key=in_flight.__getitem__)
    return least if in_flight[least] < cap else None


class Admission(str, enum.Enum):
    WAIT = "wait"
    REJECT = "reject"


def admit(queued: int, max_queued: int) -> Admission:
    """Whether a request that found every replica full may wait in the queue."""
    return Admission.WAIT if queued < max_queued else Admission.REJECT
