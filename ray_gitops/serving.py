"""The API user code inside a replica imports: `handle(name)`, `context()`,
`secret(name)`, `secret_path(name)`, `model_path(name)`, `report_load(value)`,
`time_left()`, and for a multiplexed backend `@multiplexed` and `model_id()`;
`GrpcAbort(code, details)`, raised by a gRPC method to end its call with that status.

    from ray_gitops import serving

    class Pipeline:
        def __init__(self):
            self.embedder = serving.handle("embedder")     # a backend or an endpoint

        async def __call__(self, request):
            vector = await self.embedder.remote(await request.body())
            ctx = serving.context()          # backend, replica_id, version, commit
            return {"replica": ctx.replica_id, "commit": ctx.commit, "dims": len(vector)}

A handle calls the callee's handler with the given arguments (not an HTTP
request) and returns its return value. It makes the proxy's choices: an
endpoint's traffic weights, then the callee backend's routing policy
(`[backends.X.routing]`; the least busy of two random replicas by default),
whose `json:FIELD` key is read from the call's first argument (a dict, or a
JSON body as bytes or text); other keys are HTTP's, so such a call is
routed by power_of_two; when
every replica of the callee is full it raises `BackpressureError` at once
rather than queueing. The callee's exception arrives as `HandleError` with
its traceback; so does a call whose callee replica died under it, and the
handle leaves that replica out of its choices from then on. Handles follow config changes (weights, replicas) as the
proxy does. A thin façade: the machinery is installed by the replica host
(`ray_gitops.registry`), so this module imports nothing but the vocabulary's values
(`vocabulary.replicas.serving`), that registry and `ray_gitops.model_slots` (the loader `@multiplexed` wraps),
and the clock `time_left` reads.
"""

from __future__ import annotations

import time
from typing import Awaitable, Callable, TypeVar

from ray_gitops.model_slots import multiplexed as _multiplexed
from ray_gitops.registry import (
    REPORTED_LOAD,
    current_deadline,
    current_model_id,
    installed_calls,
    installed_context,
    installed_model,
    installed_secrets,
)
from vocabulary.replicas.serving import (
    BackpressureError,
    DeadlineExceeded,
    Handle,
    HandleError,
    ModelMissing,
    ModelRefused,
    ReplicaContext,
)
from vocabulary.request_path.grpc_calls import GrpcAbort

T = TypeVar("T")

__all__ = [
    "handle", "context", "secret", "secret_path", "model_path", "ModelMissing", "report_load", "Secret", "Handle",
    "HandleError", "BackpressureError", "multiplexed", "model_id", "ModelRefused",
    "ReplicaContext", "time_left", "DeadlineExceeded", "GrpcAbort",
]


def multiplexed(loader: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """Decorate the async method that loads one model (`async def load(self, model_id)`)
    of a multiplexed backend (`[backends.NAME.multiplex]`, docs/guides/models.md): calling it returns
    the loaded model, loading it first if needed; at most `max_models_per_replica` stay loaded,
    the least recently used evicted first (its `unload()` called if it has one); concurrent calls
    for one model load it once. The proxy learns which models each replica holds from its
    answers and sends a model's requests to a replica that has it."""
    return _multiplexed(loader)


def model_id() -> str | None:
    """The model the current request names in the backend's multiplex header
    (`X-Model-Id` by default); None when it names none. Inside a multiplexed
    backend's handler only (elsewhere: None)."""
    return current_model_id()


def report_load(value: float) -> None:
    """Tell the proxy how loaded this replica is (KV-cache use, queue depth:
    any number >= 0, the same scale on every replica of the backend). Each
    answer the replica gives afterwards carries the newest value; the proxy's
    `least_loaded` and `prefix_affinity` policies rank replicas by it once
    every replica of the backend has reported (docs/guides/llm.md). Outside a
    replica it raises RuntimeError, as `context()` does."""
    installed_calls()  # inside a replica only
    REPORTED_LOAD.report(value)


class Secret(bytes):
    """A secret's value: bytes, with `.text()` for UTF-8. Its repr hides the
    value, so a log line or a traceback that shows it prints no secret."""

    def text(self) -> str:
        return self.decode("utf-8")

    def __repr__(self) -> str:
        return f"<secret, {len(self)} bytes>"

    __str__ = __repr__


def secret(name: str) -> Secret:
    """The value of secret `name` (one of the backend's `secrets`), decrypted
    by the agent and sent to this replica only (docs/guides/secrets.md). Read it when
    needed: after a rotation it returns the new value."""
    return Secret(installed_secrets().value(name))


def secret_path(name: str) -> str:
    """A 0600 file holding secret `name`, for libraries that want a path; on a
    tmpfs when the node has one, rewritten on rotation, removed when the replica stops."""
    return installed_secrets().path(name)


def model_path(name: str) -> str:
    """The local, read-only path of model `name` (one of the backend's `models`):
    the file, or the directory, whose bytes match the digest git pins. Staged
    on the node before this replica's code started (docs/guides/models.md)."""
    return installed_model(name)


def handle(name: str) -> Handle:
    """A handle to backend or endpoint `name` (the same name as in the spec)."""
    return Handle(name, installed_calls())


def context() -> ReplicaContext:
    """The backend, replica id, version and commit this code runs as.

    `commit` is the commit the backend's config was last applied from; it
    follows in-place changes (no restart) and stays put for commits that
    leave the backend as it was."""
    return installed_context()


def time_left() -> float | None:
    """Seconds left until the deadline of the request (or handle call) this code serves, never below 0;
    None when it has none. A client sets one with `X-Request-Timeout: SECONDS`, capped by its endpoint's
    `timeout_s`; it travels with the request to this replica and on with the handle calls made while
    serving it, each of which carries what is left (docs/guides/traffic-policy.md). Past it the proxy
    has answered the client 504: stop, rather than finish work no one reads. Inside a replica's code
    (elsewhere: None)."""
    deadline = current_deadline()
    return None if deadline is None else deadline.left(time.monotonic())
