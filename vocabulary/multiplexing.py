"""Many models per replica, inside the replica: each request's model id, and what the proxy is told.

The replica host (`replica.host`) installs the backend's
`[backends.X.multiplex]` settings with `install`, then for each request
reads the model id from its header (`begin`: a context variable, which
`gitops.serving.model_id()` reads). The loader user code decorates with
`@gitops.serving.multiplexed` (`gitops.model_slots`) registers what it
holds (`register`) and notes in the request's `RequestModels` the model it
loaded and the ones it evicted. Every answer of a multiplexed replica
carries `report(...)` as its `vocabulary.wire.MODELS_HEADER`: the models
loaded now, and this request's load and evictions, which the proxy routes
and counts by (`parse_report`). Values only: no I/O, no event loop.
"""

from __future__ import annotations

import contextvars
import json
from dataclasses import dataclass, field
from typing import Callable, Sequence

__all__ = [
    "RequestModels",
    "MultiplexSettings",
    "install",
    "installed",
    "begin",
    "current_request",
    "current_model_id",
    "register",
    "loaded_ids",
    "report",
    "parse_report",
    "ModelReport",
]


@dataclass(frozen=True)
class MultiplexSettings:
    header: bytes  # lower-case, as requests carry it
    max_models: int


@dataclass
class RequestModels:
    """One request: its model id (None: it named none), and what it made the replica do."""

    model_id: str | None
    loaded: bool = False
    evicted: list[str] = field(default_factory=list)


_SETTINGS: list[MultiplexSettings] = []  # at most one: installed once per replica process
_REQUEST: contextvars.ContextVar[RequestModels | None] = contextvars.ContextVar("gitops_model_request", default=None)
_HOLDERS: list[Callable[[], list[str]]] = []  # each loader's `loaded()`: normally one


def install(header: str, max_models: int) -> None:
    """Called by the replica host, before user code runs, for a multiplexed backend."""
    _SETTINGS[:] = [MultiplexSettings(header.lower().encode("latin-1"), max_models)]


def installed() -> MultiplexSettings | None:
    return _SETTINGS[0] if _SETTINGS else None


def begin(headers: Sequence[tuple[bytes, bytes]]) -> RequestModels | None:
    """Start a request of a multiplexed replica (None elsewhere): its model id, from its header."""
    settings = installed()
    if settings is None:
        return None
    model_id = None
    for name, value in headers:
        if name == settings.header:
            model_id = value.decode("utf-8", "replace")
            break
    record = RequestModels(model_id)
    _REQUEST.set(record)
    return record


def current_request() -> RequestModels | None:
    return _REQUEST.get()


def register(holder: Callable[[], list[str]]) -> None:
    """A loader's list of the models it holds, for every answer's report."""
    _HOLDERS.append(holder)


def current_model_id() -> str | None:
    record = _REQUEST.get()
    return None if record is None else record.model_id


def loaded_ids() -> list[str]:
    """Every model loaded now, least recently used first (normally one loader's)."""
    return [model_id for holder in _HOLDERS for model_id in holder()]


def report(record: RequestModels) -> bytes:
    """What an answer tells the proxy: the models loaded now, and this request's load and evictions."""
    return json.dumps([loaded_ids(), record.loaded, record.evicted], separators=(",", ":")).encode()


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
