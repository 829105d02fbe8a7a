"""The user code `bench.serving` runs on both systems: a numpy model, a handle caller, a stream.

- `Model` / `BatchedModel`: one dense layer (`tanh(x @ W)`, W is `DIM`×`DIM`
  float32): a request is one input row; batched, one call multiplies a
  matrix of rows, so W is read once per batch instead of once per request.
- `Caller`: times `CALLS` sequential handle calls, then `CALLS` calls
  `CONCURRENT` at a time, to `echo` (returns its argument), inside the
  replica: no HTTP in the figure.
- `stream`: a `StreamingResponse` of `CHUNKS` chunks of `CHUNK_BYTES`.

Ours imports them by `import_path` (through PYTHONPATH, as `bench.proxy_apps`);
`serve_*` wrap the same code as Ray Serve deployments (`@serve.batch`,
`DeploymentHandle`). Measures nothing itself but the handle timings.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator, Awaitable, Callable

DIM = 1024
MAX_BATCH = 16
BATCH_WAIT_S = 0.005
CALLS = 1000
CONCURRENT = 16
CHUNKS = 2000
CHUNK_BYTES = 1024


class Model:
    """One request, one forward pass."""

    def __init__(self) -> None:
        import numpy as np

        self._np = np
        self._weights = np.random.default_rng(0).standard_normal((DIM, DIM), dtype=np.float32)

    def forward(self, rows: int) -> list[float]:
        batch = self._np.ones((rows, DIM), dtype=self._np.float32)
        return [float(value) for value in self._np.tanh(batch @ self._weights)[:, 0]]

    def __call__(self, request: Any) -> float:
        return self.forward(1)[0]


class BatchedModel(Model):
    """ray-gitops batching (`[batching]`): the handler receives the list of requests."""

    def __call__(self, requests: list[Any]) -> list[float]:  # type: ignore[override]  # a batched handler takes the list: not Model's signature
        return self.forward(len(requests))


async def echo(value: Any) -> Any:
    return value


async def time_calls(call: Callable[[int], Awaitable[Any]], calls: int = CALLS, concurrent: int = CONCURRENT) -> dict[str, Any]:
    """Per-call seconds of `calls` sequential calls, and calls/s `concurrent` at a time."""
    await call(0)  # the first call subscribes / resolves; outside the measurement
    sequential = []
    for i in range(calls):
        started = time.perf_counter()
        await call(i)
        sequential.append(time.perf_counter() - started)
    started = time.perf_counter()
    for first in range(0, calls, concurrent):
        await asyncio.gather(*(call(i) for i in range(first, min(first + concurrent, calls))))
    return {"sequential_s": sequential, "concurrent_calls_per_s": calls / (time.perf_counter() - started)}


class Caller:
    """Times handle calls to the `echo` backend (`ray_gitops.serving.handle`)."""

    async def __call__(self, request: Any) -> dict[str, Any]:
        from ray_gitops import serving

        callee = serving.handle("echo")
        return await time_calls(lambda i: callee.remote(i))


async def _chunks() -> AsyncIterator[bytes]:
    chunk = b"x" * CHUNK_BYTES
    for _ in range(CHUNKS):
        yield chunk


async def stream(request: Any) -> Any:
    from starlette.responses import StreamingResponse

    return StreamingResponse(_chunks(), media_type="application/octet-stream")


# --- the same code as Ray Serve deployments ----------------------------------------------------


def serve_model(batched: bool) -> Any:
    from ray import serve

    if not batched:
        return serve.deployment(Model, name="Model")

    @serve.deployment(name="BatchedModel")
    class ServeBatched(Model):
        @serve.batch(max_batch_size=MAX_BATCH, batch_wait_timeout_s=BATCH_WAIT_S)
        async def run(self, requests: list[Any]) -> list[float]:
            return self.forward(len(requests))

        async def __call__(self, request: Any) -> float:  # type: ignore[override]  # Serve's batch decorator takes one request per call
            return await self.run(request)

    return ServeBatched


def serve_caller() -> Any:
    """The Serve application: a caller deployment with a DeploymentHandle to an echo deployment."""
    from ray import serve

    class Echo:
        async def __call__(self, value: Any) -> Any:
            return value

    class ServeCaller:
        def __init__(self, callee: Any) -> None:
            self.callee = callee

        async def __call__(self, request: Any) -> dict[str, Any]:
            return await time_calls(lambda i: self.callee.remote(i))

    # Applied, not decorated: mypy keeps a decorated class's own type, which has no `bind`.
    return serve.deployment(name="Caller")(ServeCaller).bind(serve.deployment(name="Echo")(Echo).bind())


def serve_stream() -> Any:
    from ray import serve

    class ServeStream:
        async def __call__(self, request: Any) -> Any:
            return await stream(request)

    return serve.deployment(name="Stream")(ServeStream).bind()
