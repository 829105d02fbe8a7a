"""The API user code inside a replica imports: `handle(name)` and `context()`.

    from gitops import serving

    class Pipeline:
        def __init__(self):
            self.embedder = serving.handle("embedder")     # a backend or an endpoint

        async def __call__(self, request):
            vector = await self.embedder.remote(await request.body())
            ctx = serving.context()          # backend, replica_id, version, commit
            return {"replica": ctx.replica_id, "commit": ctx.commit, "dims": len(vector)}

A handle calls the callee's handler with the given arguments (not an HTTP
request) and returns its return value. It makes the proxy's choices: an
endpoint's traffic weights, then the least busy of two random replicas; when
every replica of the callee is full it raises `BackpressureError` at once
rather than queueing. The callee's exception arrives as `HandleError` with
its traceback. Handles follow config changes (weights, replicas) as the
proxy does. A thin façade: the machinery is installed by the replica host
(`vocabulary.serving`), so this module imports nothing but the vocabulary.
"""

from __future__ import annotations

from vocabulary.serving import (
    BackpressureError,
    Handle,
    HandleError,
    ReplicaContext,
    installed_calls,
    installed_context,
)

__all__ = ["handle", "context", "Handle", "HandleError", "BackpressureError", "ReplicaContext"]


def handle(name: str) -> Handle:
    """A handle to backend or endpoint `name` (the same name as in the spec)."""
    return Handle(name, installed_calls())


def context() -> ReplicaContext:
    """The backend, replica id, version and commit this code runs as.

    `commit` is the commit the backend's config was last applied from; it
    follows in-place changes (no restart) and stays put for commits that
    leave the backend as it was."""
    return installed_context()
