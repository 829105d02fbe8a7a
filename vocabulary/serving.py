"""What user code inside a replica may ask of ray-gitops: handles and its context.

`gitops.serving` is the module users import; it is a façade over this one.
The replica host (`replica.host`) installs, once at start-up and before any
user code runs, the replica's `ReplicaContext` and the `HandleCalls` that
carry handle calls (`replica.handles`: Ray, a long poll on the controller).
Outside a replica nothing is installed and both functions say so.

The context's `commit` is the commit the backend's config was last applied
from. The replica starts with the one it was created under; a later commit
that changes the backend in place (its `user_config`, replica count,
batching...) restarts nothing, so `HandleCalls.commit_of` reads the newer one
from the controller's long poll, lazily: the first `context()` starts
following it. A commit that leaves the backend unchanged does not move it.

A handle's answers and failures cross as plain values (`HandleOutcome`), so
the exceptions user code catches are the ones below, never a Ray type. No
Ray, no I/O here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Any, Protocol

__all__ = [
    "ReplicaContext",
    "HandleOutcome",
    "HandleCalls",
    "HandleError",
    "BackpressureError",
    "Handle",
    "install",
    "installed_context",
    "installed_calls",
    "SecretStore",
    "install_secrets",
    "installed_secrets",
    "ModelMissing",
    "install_models",
    "installed_model",
    "ReportedLoad",
    "REPORTED_LOAD",
]


@dataclass(frozen=True)
class ReplicaContext:
    """The replica user code runs in."""

    backend: str
    replica_id: str
    version: str
    commit: str | None = None  # None: applied by something other than the agent (tests, by hand)


class HandleOutcome(str, enum.Enum):
    OK = "ok"  # with the callee's return value
    ERROR = "error"  # the callee raised; with its traceback text
    BACKPRESSURE = "backpressure"  # every replica of the target is full; with why
    UNAVAILABLE = "unavailable"  # no such backend or endpoint, or no replica; with why


class HandleCalls(Protocol):
    async def call(self, target: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[HandleOutcome, Any]:
        """Call backend or endpoint `target` once; never raises for the callee's failures."""

    def commit_of(self, backend: str) -> str | None:
        """The newest commit the controller published for `backend`, or None
        while not known yet (the first ask starts following it). Callable
        from any thread: a sync handler runs in one."""


class HandleError(Exception):
    """A handle call failed: the callee raised, or it cannot be reached."""


class BackpressureError(HandleError):
    """Every replica of the callee is busy: try again later, or shed the load."""


class Handle:
    """Calls one backend or endpoint: `await handle.remote(*args, **kwargs)`."""

    def __init__(self, target: str, calls: HandleCalls) -> None:
        self.target = target
        self._calls = calls

    async def remote(self, *args: Any, **kwargs: Any) -> Any:
        outcome, value = await self._calls.call(self.target, args, kwargs)
        if outcome == HandleOutcome.OK:
            return value
        if outcome == HandleOutcome.BACKPRESSURE:
            raise BackpressureError(f"handle to '{self.target}': {value}")
        if outcome == HandleOutcome.ERROR:
            raise HandleError(f"handle to '{self.target}': the callee raised:\n{value}")
        raise HandleError(f"handle to '{self.target}': {value}")

    def __repr__(self) -> str:
        return f"Handle({self.target!r})"


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


class SecretStore(Protocol):
    """A replica's secrets (`replica.secrets.SecretBox`)."""

    def value(self, name: str) -> bytes: ...

    def path(self, name: str) -> str: ...


def install_secrets(store: SecretStore) -> None:
    """Called by the replica host before user code runs."""
    _installed["secrets"] = store


def installed_secrets() -> SecretStore:
    store: SecretStore = _require("secrets")
    return store


class ModelMissing(LookupError):
    """User code asked for a model its backend does not list."""


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


def installed_calls() -> HandleCalls:
    return _require("calls")


class ReportedLoad:
    """The load user code last reported (`gitops.serving.report_load`): a
    finite number >= 0 (KV-cache use, queue depth...), or None before any
    report. The replica's answers carry it to the proxy (`vocabulary.wire.LOAD_HEADER`)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: float | None = None

    def report(self, value: float) -> None:
        number = float(value)
        if not number >= 0 or number == float("inf"):
            raise ValueError(f"a reported load must be a finite number >= 0 (got {value!r})")
        self.value = number


# One per process: a replica's process runs one replica.
REPORTED_LOAD = ReportedLoad()


def _require(what: str) -> Any:
    value = _installed.get(what)
    if value is None:
        raise RuntimeError("gitops.serving works only inside a replica (user code that a backend runs)")
    return value
