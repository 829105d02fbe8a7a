"""What the replica host installs in its process before user code runs, and what `serving` reads back.

The per-process registries of the user API: the replica's `ReplicaContext`
and the `HandleCalls` that carry its handle calls (`replica.handles`), its
secrets (`replica.secrets.SecretBox`), the local paths of its staged
models, and for a multiplexed backend its `[backends.X.multiplex]`
settings, each request's `RequestModels` (a context variable, set by
`begin_models` from the request's header) and the loaders that hold models
(`register`), and each request's or handle call's `Deadline` (a context
variable, set by `begin_deadline` from what the call carried, until `end_deadline`; the handle
calls user code makes from there read it, `current_deadline`). `REPORTED_LOAD` is the load user code last reported;
the token sink (`install_token_sink`) where an OpenAI backend's token counts go (`ray_gitops.llm.publishing`). The
replica host (`replica.host`) fills them, once at start-up (per request for
`begin_models` and `begin_deadline`); `serving` and `model_slots` read them. Outside a replica
nothing is installed and every reader says so.

The values themselves (`ReplicaContext`, `Handle`, `RequestModels`, the
multiplex report's format...) are `vocabulary.replicas.serving`'s and
`vocabulary.request_path.multiplexing`'s; this module holds the state. No I/O.
"""

from __future__ import annotations

import contextvars
from dataclasses import replace
from typing import Any, Callable, Sequence

from vocabulary.request_path.deadlines import Deadline
from vocabulary.request_path.multiplexing import MultiplexSettings, RequestModels
from vocabulary.replicas.token_counts import ModelTokens
from vocabulary.replicas.serving import HandleCalls, ModelMissing, ReplicaContext, ReportedLoad, SecretStore

__all__ = [
    "install",
    "installed_context",
    "installed_calls",
    "install_secrets",
    "installed_secrets",
    "install_models",
    "installed_model",
    "REPORTED_LOAD",
    "install_multiplex",
    "installed_multiplex",
    "begin_models",
    "current_request",
    "current_model_id",
    "register",
    "loaded_ids",
    "begin_deadline",
    "end_deadline",
    "current_deadline",
    "install_token_sink",
    "installed_token_sink",
]

_installed: dict[str, Any] = {}


def install(context: ReplicaContext, calls: HandleCalls) -> None:
    """Called by the replica host before user code runs."""
    _installed["context"] = context
    _installed["calls"] = calls


def installed_context() -> ReplicaContext:
    """The installed context, with the newest commit published for its backend."""
    context: ReplicaContext = _require("context")
    newer = installed_calls().commit_of(context.backend)
    return context if newer is None or newer == context.commit else replace(context, commit=newer)


def installed_calls() -> HandleCalls:
    return _require("calls")


def install_secrets(store: SecretStore) -> None:
    """Called by the replica host before user code runs."""
    _installed["secrets"] = store


def installed_secrets() -> SecretStore:
    store: SecretStore = _require("secrets")
    return store


def install_models(paths: dict[str, str]) -> None:
    """Called by the replica host once its models are staged, before user code runs."""
    _installed["models"] = dict(paths)


def installed_model(name: str) -> str:
    """The local path of model `name`, staged and verified before the replica started."""
    paths: dict[str, str] = _require("models")
    if name not in paths:
        listed = ", ".join(sorted(paths)) or "none"
        raise ModelMissing(f"model '{name}' is not in this backend's models (it lists: {listed})")
    return paths[name]


def _require(what: str) -> Any:
    value = _installed.get(what)
    if value is None:
        raise RuntimeError("ray_gitops.serving works only inside a replica (user code that a backend runs)")
    return value


# One per process: a replica's process runs one replica.
REPORTED_LOAD = ReportedLoad()

def install_token_sink(sink: Callable[[dict[str, ModelTokens]], None]) -> None:
    """Called by the replica host before user code runs: `sink` adds counts per model to the node's file
    (where an OpenAI backend's token counts go, `ray_gitops.llm.publishing`)."""
    _installed["token_sink"] = sink


def installed_token_sink() -> Callable[[dict[str, ModelTokens]], None] | None:
    """The replica host's token sink; None outside a replica (a test that builds the app itself)."""
    sink: Callable[[dict[str, ModelTokens]], None] | None = _installed.get("token_sink")
    return sink


# --- a multiplexed backend ------------------------------------------------------------

_SETTINGS: list[MultiplexSettings] = []  # at most one: installed once per replica process
_REQUEST: contextvars.ContextVar[RequestModels | None] = contextvars.ContextVar("gitops_model_request", default=None)
_HOLDERS: list[Callable[[], list[str]]] = []  # each loader's `loaded()`: normally one


def install_multiplex(
    header: str, max_models: int, accepts: Callable[[str], bool] | None = None, accepted: str = "any id"
) -> None:
    """Called by the replica host, before user code runs, for a multiplexed backend;
    `accepts`: the ids its loader may be asked for (`MultiplexConfig.accepts`), said as `accepted`."""
    encoded = header.lower().encode("latin-1")
    settings = MultiplexSettings(encoded, max_models) if accepts is None else (
        MultiplexSettings(encoded, max_models, accepts, accepted)
    )
    _SETTINGS[:] = [settings]


def installed_multiplex() -> MultiplexSettings | None:
    return _SETTINGS[0] if _SETTINGS else None


def begin_models(headers: Sequence[tuple[bytes, bytes]]) -> RequestModels | None:
    """Start a request of a multiplexed replica (None elsewhere): its model id, from its header."""
    settings = installed_multiplex()
    if settings is None:
        return None
    record = RequestModels(settings.model_id(headers))
    _REQUEST.set(record)
    return record


def current_request() -> RequestModels | None:
    return _REQUEST.get()


def current_model_id() -> str | None:
    record = _REQUEST.get()
    return None if record is None else record.model_id


def register(holder: Callable[[], list[str]]) -> None:
    """A loader's list of the models it holds, for every answer's report."""
    _HOLDERS.append(holder)


def loaded_ids() -> list[str]:
    """Every model loaded now, least recently used first (normally one loader's)."""
    return [model_id for holder in _HOLDERS for model_id in holder()]


# --- deadlines ------------------------------------------------------------------------

_DEADLINE: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar("gitops_deadline", default=None)


def begin_deadline(deadline: Deadline | None) -> contextvars.Token[Deadline | None]:
    """Start a request or handle call that must be answered by `deadline` (None: it carries none). Set in
    the task that runs its user code: the tasks and threads that code starts (handle calls, a sync
    handler's thread) inherit it. Pair with `end_deadline(token)` once its user code is done."""
    return _DEADLINE.set(deadline)


def end_deadline(token: contextvars.Token[Deadline | None]) -> None:
    """The request `begin_deadline` started is over: the task's deadline is what it was before."""
    _DEADLINE.reset(token)


def current_deadline() -> Deadline | None:
    return _DEADLINE.get()
