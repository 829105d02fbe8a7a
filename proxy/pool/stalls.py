"""Per-replica progress and the stall rule: when a replica that passes its health check has hung.

A replica whose process lives and whose health check answers may still hang
every request it takes (ray-project/ray#61263: a wedged handler, a lock never
released). Health checks cannot see that; only the proxy, which sends the
requests, can. `ReplicaProgress` counts, for one replica, the calls sent and
the calls answered (a reply, a stream's head or a handler's exception: any
sign of life), when each outstanding call was sent, and when the replica
last answered anything.

The rule (`ReplicaProgress.timed_out`): a replica is **stalled** when
`STRIKES` (2) of its calls ran out the endpoint's timeout while outstanding
on it and the replica answered nothing since the first of them was sent. A
replica that answers other calls meanwhile is slow for some requests, not
stalled; one call alone past its timeout is one slow request (a replica of a
backend with a single replica would otherwise leave routing for one slow
input), so a second is needed: a hung replica holding several calls shows
it within one timeout, a replica taking one call at a time within two. Once
stalled it stays stalled (the proxy keeps it out of routing until the
controller has replaced it), and `Stall` says what was seen, for the log,
the status and the controller.

Pure: values and a clock given by the caller; no asyncio, no Ray.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable

__all__ = ["ReplicaProgress", "Stall", "STRIKES"]

STRIKES = 2  # timed-out calls, with nothing answered since the first was sent, that make a stall


@dataclass(frozen=True)
class Stall:
    """What made a replica stalled: how long it answered nothing, how many calls timed out and were outstanding."""

    replica_id: str
    silent_s: float
    timed_out: int
    outstanding: int
    sent: int
    answered: int

    def message(self) -> str:
        return (
            f"{self.timed_out} calls ran out their timeout and the replica answered nothing for "
            f"{self.silent_s:.1f}s ({self.outstanding} outstanding; "
            f"{self.answered} of {self.sent} calls answered since the proxy started)"
        )


class ReplicaProgress:
    """One replica's calls as its proxy sees them: sent, answered, outstanding since when."""

    __slots__ = ("replica_id", "strikes", "sent", "answered", "last_answer_at", "stall", "_outstanding",
                 "_timed_out", "_silent_since")

    def __init__(self, replica_id: str, strikes: int = STRIKES) -> None:
        self.replica_id = replica_id
        self.strikes = strikes
        self.sent = 0
        self.answered = 0
        self.last_answer_at: float | None = None
        self.stall: Stall | None = None
        self._outstanding: dict[Hashable, float] = {}
        self._timed_out = 0  # calls timed out with nothing answered since the first of them was sent
        self._silent_since: float | None = None  # when the first of those was sent

    def outstanding(self) -> int:
        return len(self._outstanding)

    def oldest_sent_at(self) -> float | None:
        """When the oldest call still outstanding was sent (None: nothing outstanding)."""
        return min(self._outstanding.values(), default=None)

    def calls(self) -> list[Hashable]:
        """The outstanding calls' keys, oldest first."""
        return sorted(self._outstanding, key=self._outstanding.__getitem__)

    def on_sent(self, call: Hashable, now: float) -> None:
        self.sent += 1
        self._outstanding[call] = now

    def on_answered(self, call: Hashable, now: float) -> None:
        """The replica answered `call` (a reply, a stream's head, or its handler's exception)."""
        self.answered += 1
        self.last_answer_at = now
        self._outstanding.pop(call, None)
        self._timed_out, self._silent_since = 0, None

    def on_ended(self, call: Hashable) -> None:
        """`call` ended without an answer (died, cancelled, timed out): no longer outstanding."""
        self._outstanding.pop(call, None)

    def timed_out(self, call: Hashable, now: float) -> Stall | None:
        """`call` ran out its endpoint's timeout while outstanding here: the stall it
        reveals (also kept in `stall`), or None (the replica answered since it was sent,
        this is its first strike, or it is already stalled)."""
        sent_at = self._outstanding.get(call)
        if sent_at is None or self.stall is not None:
            return None
        if self.last_answer_at is not None and self.last_answer_at >= sent_at:
            return None  # it answered another call meanwhile: slow, not hung
        self._timed_out += 1
        self._silent_since = sent_at if self._silent_since is None else min(self._silent_since, sent_at)
        if self._timed_out < self.strikes:
            return None
        self.stall = Stall(self.replica_id, now - self._silent_since, self._timed_out, len(self._outstanding),
                           self.sent, self.answered)
        return self.stall
