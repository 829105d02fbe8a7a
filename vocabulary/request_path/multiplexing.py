"""Many models per replica, as values: a request's model record, the settings, and what the proxy is told.

A multiplexed backend's `[backends.X.multiplex]` settings (`MultiplexSettings`:
the header naming a request's model, at most how many stay loaded, which ids
its loader accepts: `vocabulary.spec.routing.MultiplexConfig.accepts`); one
request's `RequestModels` (its model id, and whether it made the replica load
a model or evict some). The replica host keeps these per process and per
request (`ray_gitops.registry`), and the loader user code decorates with
`@ray_gitops.serving.multiplexed` (`ray_gitops.model_slots`) notes in them
what it did. Every answer of a multiplexed replica carries `report(...)` as its
`vocabulary.request_path.wire.MODELS_HEADER`: the models loaded now, and this request's
load and evictions, which the proxy routes and counts by (`parse_report`).
Values only: no state, no I/O, no event loop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable, Sequence

__all__ = [
    "RequestModels",
    "MultiplexSettings",
    "report",
    "parse_report",
    "ModelReport",
]


def _any_id(model_id: str) -> bool:
    return True


@dataclass(frozen=True)
class MultiplexSettings:
    header: bytes  # lower-case, as requests carry it
    max_models: int
    accepts: Callable[[str], bool] = _any_id  # the backend's rule (MultiplexConfig.accepts)
    accepted: str = "any id"  # what `accepts` lets through, as an error says it

    def model_id(self, headers: Sequence[tuple[bytes, bytes]]) -> str | None:
        """The model a request's headers name (None: they name none)."""
        for name, value in headers:
            if name == self.header:
                return value.decode("utf-8", "replace")
        return None


@dataclass
class RequestModels:
    """One request: its model id (None: it named none), and what it made the replica do."""

    model_id: str | None
    loaded: bool = False
    evicted: list[str] = field(default_factory=list)


def report(loaded: list[str], record: RequestModels) -> bytes:
    """What an answer tells the proxy: the models `loaded` now, and this request's load and evictions."""
    return json.dumps([loaded, record.loaded, record.evicted], separators=(",", ":")).encode()


@dataclass(frozen=True)
class ModelReport:
    loaded: frozenset[str]
    loaded_now: bool
    evicted: tuple[str, ...]


def parse_report(value: bytes) -> ModelReport | None:
    """`report`'s bytes back; None for anything else (never raises)."""
    try:
        loaded, loaded_now, evicted = json.loads(value)
    except (ValueError, TypeError):
        return None
    if not (isinstance(loaded, list) and isinstance(evicted, list) and isinstance(loaded_now, bool)):
        return None
    return ModelReport(frozenset(str(m) for m in loaded), loaded_now, tuple(str(m) for m in evicted))
