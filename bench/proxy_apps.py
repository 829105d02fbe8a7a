"""The user code every system in `bench.proxy` serves: one handler, three costs.

- `noop`: answers at once;
- `async5`: awaits 5 ms (an I/O-bound model call);
- `cpu5`: burns 5 ms of CPU (a CPU-bound model).

And the handlers of the other HTTP benchmarks, served the same way:

- `echo`: answers the request's body (`bench.payloads`);
- `consume`: reads the whole body, answers 1 KiB (`bench.payloads`);
- `sse`: server-sent events, `SSE_RATE` small events a second for
  `SSE_SECONDS` (the `seconds` query parameter overrides it) (`bench.streams`).

Exposed as plain callables for our replicas, as a Starlette app for uvicorn
and granian, and as the name the Serve deployments dispatch on. Imported by
Ray workers through PYTHONPATH; measures nothing.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, AsyncIterator

HANDLERS = ("noop", "async5", "cpu5")
REPLICAS = {"noop": 1, "async5": 2, "cpu5": 2, "echo": 1, "consume": 1, "sse": 1}
# Requests one replica takes at once where 100 would queue the benchmark's own load (thousands of open streams).
CONCURRENCY = {"sse": 10_000}
BUSY_S = 0.005
ANSWER = b"a" * 1024
SSE_RATE = 20
SSE_SECONDS = 30.0


def burn(seconds: float = BUSY_S) -> None:
    """Keep one core busy for `seconds` of process CPU time."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


async def noop(request: Any) -> str:
    return "ok"


async def async5(request: Any) -> str:
    await asyncio.sleep(BUSY_S)
    return "ok"


def cpu5(request: Any) -> str:
    burn()
    return "ok"


async def echo(request: Any) -> bytes:
    return bytes(await request.body())


async def consume(request: Any) -> bytes:
    await request.body()
    return ANSWER


async def events(seconds: float) -> AsyncIterator[bytes]:
    """`SSE_RATE` events a second on a fixed schedule (a late one does not push the others back)."""
    period = 1 / SSE_RATE
    started = time.monotonic()
    for i in range(int(seconds * SSE_RATE)):
        delay = started + i * period - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        yield b"data: token %d\n\n" % i


def sse_response(request: Any) -> Any:
    from starlette.responses import StreamingResponse

    seconds = float(request.query_params.get("seconds", SSE_SECONDS))
    return StreamingResponse(events(seconds), media_type="text/event-stream")


async def sse(request: Any) -> Any:
    return sse_response(request)


async def answer(handler: str, request: Any = None) -> Any:
    """What a Serve deployment or Starlette route does for `handler`: text, bytes or a Starlette response."""
    if handler == "async5":
        await asyncio.sleep(BUSY_S)
    elif handler == "cpu5":
        burn()
    elif handler == "echo":
        return await echo(request)
    elif handler == "consume":
        return await consume(request)
    elif handler == "sse":
        return sse_response(request)
    return "ok"


def _starlette_app() -> Any:
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse, Response
    from starlette.routing import Route

    handler = os.environ.get("BENCH_HANDLER", "noop")

    async def endpoint(request: Any) -> Response:
        answered = await answer(handler, request)
        if isinstance(answered, Response):
            return answered
        if isinstance(answered, bytes):
            return Response(answered, media_type="application/octet-stream")
        return PlainTextResponse(answered)

    return Starlette(routes=[Route("/", endpoint, methods=["GET", "POST"])])


def __getattr__(name: str) -> Any:
    # Built on first use, so Ray workers importing the handlers need no Starlette set-up.
    if name == "starlette_app":
        return _starlette_app()
    raise AttributeError(name)


_RAW_RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"


def serve_raw(port: int) -> None:
    """The ceiling of one Python process: asyncio.Protocol + httptools on uvloop, no framework."""
    import httptools
    import uvloop

    class Http(asyncio.Protocol):
        def connection_made(self, transport: Any) -> None:
            self._transport = transport
            self._parser = httptools.HttpRequestParser(self)

        def data_received(self, data: bytes) -> None:
            self._parser.feed_data(data)

        def on_message_complete(self) -> None:
            self._transport.write(_RAW_RESPONSE)

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Http, "127.0.0.1", port, backlog=1024)
        await server.serve_forever()

    uvloop.run(main())


def serve_deployment(handler: str) -> Any:
    """A Ray Serve deployment running `handler` (sync for the CPU-bound one, as a user would write it)."""
    from ray import serve

    if handler == "cpu5":
        @serve.deployment
        class SyncBench:
            def __init__(self, handler: str) -> None:
                self.handler = handler

            def __call__(self, request: Any) -> str:
                burn()
                return "ok"

        return SyncBench

    @serve.deployment
    class AsyncBench:
        def __init__(self, handler: str) -> None:
            self.handler = handler

        async def __call__(self, request: Any) -> Any:
            return await answer(self.handler, request)

    return AsyncBench
