"""What user code inside a replica meets, as values: its context, handles and their errors.

`ray_gitops.serving` is the module users import; it is a façade over these
values and over the registries the replica host fills (`ray_gitops.registry`:
the installed context, the `HandleCalls` that carry handle calls —
`replica.handles`: Ray, a long poll on the controller —, secrets, models,
the reported load). This module holds no state of its own.

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
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "ReplicaContext",
    "HandleOutcome",
    "HandleCalls",
    "HandleError",
    "BackpressureError",
    "DeadlineExceeded",
    "Handle",
    "SecretStore",
    "ModelMissing",
    "ModelRefused",
    "ReportedLoad",
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
    DEADLINE = "deadline"  # the caller's deadline passed before the call or while it ran; with which


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


class DeadlineExceeded(HandleError, TimeoutError):
    """The request's deadline (its client's `X-Request-Timeout`) passed: before a handle call was made
    (it was not), or while the callee ran it (it was cancelled there). Also a `TimeoutError`."""


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
        if outcome == HandleOutcome.DEADLINE:
            raise DeadlineExceeded(f"handle to '{self.target}': {value}")
        if outcome == HandleOutcome.ERROR:
            raise HandleError(f"handle to '{self.target}': the callee raised:\n{value}")
        raise HandleError(f"handle to '{self.target}': {value}")

    def __repr__(self) -> str:
        return f"Handle({self.target!r})"


class SecretStore(Protocol):
    """A replica's secrets (`replica.secrets.SecretBox`)."""

    def value(self, name: str) -> bytes: ...

    def path(self, name: str) -> str: ...


class ModelMissing(LookupError):
    """User code asked for a model its backend does not list."""


class ModelRefused(ValueError):
    """A multiplexed loader was asked for a model id its backend does not accept
    (`[backends.X.multiplex]` `models` / `model_pattern`): from a handle call, or
    an id user code took from elsewhere than the checked header."""


class ReportedLoad:
    """The load user code last reported (`ray_gitops.serving.report_load`): a
    finite number >= 0 (KV-cache use, queue depth...), or None before any
    report. The replica's answers carry it to the proxy (`vocabulary.request_path.wire.LOAD_HEADER`)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: float | None = None

    def report(self, value: float) -> None:
        number = float(value)
        if not number >= 0 or number == float("inf"):
            raise ValueError(f"a reported load must be a finite number >= 0 (got {value!r})")
        self.value = number

