"""Circuit limits: how much a backend is asked to hold before new requests are turned away (pure).

An endpoint's `[circuit]` (`vocabulary.spec.traffic_policy.CircuitConfig`)
bounds, per proxy worker and per backend, as Envoy's circuit breakers do:

- **pending requests**: requests waiting in the backend's queue for a replica
  slot (every replica full). A request that would wait beyond
  `max_pending_requests` is answered 503 with `Retry-After` at once, rather
  than queue behind a backend that is not keeping up;
- **concurrent retries**: retries in flight to the backend at once. A retry
  beyond `max_retries` is not sent: its request is answered 503 with
  `Retry-After`, so a backend failing under load is not sent a wave of
  retries on top of it (the retry budget, `proxy.pool.retrying`, bounds their
  share over 10 s; this bounds them at any instant).

`Circuit` is kept per backend in its pool (`proxy.pool.replicas`): the retries
in flight now, and how often each limit turned a request away. The queue's
length is the pool's. These limits are separate from the per-tenant limits
(`proxy.routes.rate_limits`, 429) and from the proxy's own bound on a
backend's queue (`ProxySettings.max_queued_per_backend`). No I/O.
"""

from __future__ import annotations

import enum

from vocabulary.spec.traffic_policy import CircuitConfig

__all__ = ["Limit", "Circuit"]


class Limit(enum.Enum):
    """Which circuit limit turned a request away (the label of its metric)."""

    PENDING = "pending"
    RETRIES = "retries"


class Circuit:
    """One backend's retries in flight, against its endpoints' `[circuit]` limits."""

    __slots__ = ("retrying", "refused")

    def __init__(self) -> None:
        self.retrying = 0  # retries sent to the backend and not yet ended
        self.refused = {limit: 0 for limit in Limit}  # requests turned away, since the proxy started

    def may_wait(self, queued: int, config: CircuitConfig | None) -> bool:
        """Whether one more request may wait in line behind `queued` others."""
        if config is None or queued < config.max_pending_requests:
            return True
        self.refused[Limit.PENDING] += 1
        return False

    def may_retry(self, config: CircuitConfig | None) -> bool:
        """Whether one more retry may go out now (then `retry_started`; `retry_ended` when it ends)."""
        if config is None or self.retrying < config.max_retries:
            return True
        self.refused[Limit.RETRIES] += 1
        return False

    def retry_started(self) -> None:
        self.retrying += 1

    def retry_ended(self) -> None:
        self.retrying -= 1
