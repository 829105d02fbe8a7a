"""Streams that fall back to Ray keep to a slow client's pace (issue 27, row 14).

A real replica actor under real Ray whose handler streams as fast as it
can; the proxy's Ray stream caller (`proxy.shell.raycalls.RayStreams`) takes one
chunk and then nothing for a while, as a client that stopped reading would.
The replica's generator must pause a bounded number of items ahead instead
of filling the object store.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import pytest
import ray
from starlette.requests import Request
from starlette.responses import StreamingResponse

from proxy.shell.raycalls import GENERATOR_BACKPRESSURE_ITEMS, RayStreams
from replica.host import Replica
from vocabulary.spec.backends import BackendConfig
from vocabulary.control.actor_apis import Remote
from vocabulary.request_path.wire import StreamStart, make_request

pytestmark = pytest.mark.real

CHUNK = b"x" * 65536


class Firehose:
    """Streams 64 KiB chunks without end, counting them in the size of the file the body names."""

    async def __call__(self, request: Request) -> StreamingResponse:
        progress = Path((await request.body()).decode())

        async def chunks() -> AsyncIterator[bytes]:
            while True:
                with progress.open("ab") as made:
                    made.write(b".")  # one byte per chunk: the file's size is the count
                yield CHUNK
                await asyncio.sleep(0)

        return StreamingResponse(chunks())


@pytest.fixture(scope="module")
def replica(ray_session: str) -> Iterator[Any]:
    handle = ray.remote(Replica).options(num_cpus=0).remote(
        BackendConfig(name="firehose", version="v1", import_path=f"{__name__}:Firehose"), "firehose-r1"
    )
    ray.get(handle.initialize.remote(), timeout=120)
    yield handle
    ray.kill(handle)


def _made(progress: Path) -> int:
    return progress.stat().st_size if progress.exists() else 0


def test_row14_a_stream_over_ray_pauses_its_generator_a_bounded_number_of_chunks_ahead_of_a_slow_client(
    replica: Any, tmp_path: Path
) -> None:
    progress = tmp_path / "made"
    start = ray.get(replica.handle_request.remote(make_request("GET", "/", body=str(progress).encode())), timeout=60)
    assert isinstance(start, StreamStart)

    async def slow_client() -> tuple[int, int]:
        chunks = RayStreams().stream(Remote(replica), start)
        try:
            assert (await anext(chunks)).startswith(b"x")
            await asyncio.sleep(3.0)  # the client stops reading here
            paused_at = _made(progress)
            await asyncio.sleep(1.0)
            return paused_at, _made(progress)
        finally:
            await chunks.aclose()

    paused_at, later = asyncio.run(slow_client())
    # Without backpressure the generator ran on (8,150 chunks after 3 s, 10,834 after 4 s: 700 MB into the
    # object store). With it, the generator stops a bounded distance ahead: the Ray items in flight plus
    # what the replica's own stream buffers hold (134 chunks here), and makes nothing more while paused.
    bound = 16 * GENERATOR_BACKPRESSURE_ITEMS
    assert paused_at <= bound and later == paused_at, (paused_at, later, bound)


async def chatterbox(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A WebSocket app that accepts, then sends 64 KiB messages without end,
    counting them in the size of the file its query string names."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    progress = Path(scope["query_string"].decode())
    assert (await receive())["type"] == "websocket.connect"
    await send({"type": "websocket.accept"})
    while True:
        with progress.open("ab") as made:
            made.write(b".")
        await send({"type": "websocket.send", "bytes": CHUNK})


@pytest.fixture(scope="module")
def websocket_replica(ray_session: str) -> Iterator[Any]:
    handle = ray.remote(Replica).options(num_cpus=0).remote(
        BackendConfig(name="chatter", version="v1", import_path=f"{__name__}:chatterbox"), "chatter-r1"
    )
    ray.get(handle.initialize.remote(), timeout=120)
    yield handle
    ray.kill(handle)


def test_row14_websocket_output_over_ray_pauses_the_app_a_bounded_number_of_messages_ahead_of_a_slow_client(
    websocket_replica: Any, tmp_path: Path
) -> None:
    progress = tmp_path / "sent"

    async def slow_client() -> tuple[int, int]:
        request = make_request("GET", "/ws", str(progress).encode())
        messages = RayStreams().open_websocket(Remote(websocket_replica), "ws-slow", request)
        try:
            assert (await anext(messages))["type"] == "websocket.accept"
            await asyncio.sleep(3.0)  # the client reads nothing more
            paused_at = _made(progress)
            await asyncio.sleep(1.0)
            return paused_at, _made(progress)
        finally:
            await messages.aclose()

    paused_at, later = asyncio.run(slow_client())
    # Before: the app's sends queued without bound in the replica and the generator ran ahead into the
    # object store. Now the app waits: Ray's items in flight plus the session's own outbound bound.
    bound = 4 * GENERATOR_BACKPRESSURE_ITEMS
    assert paused_at <= bound and later == paused_at, (paused_at, later, bound)
