"""The replica's side of streaming and ASGI apps, in-process (no Ray): what
a streaming handler's call answers, how the rest is read, which
`import_path` targets count as ASGI apps, and an app's lifespan."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, AsyncIterator, Iterator

import pytest
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import StreamingResponse

from replica.calling.asgi import _AHEAD_MESSAGES, _GATHER_MOST, is_asgi_app
from replica.host import Replica
from replica.calling.streams import StreamTable
from vocabulary.request_path.wire import StreamStart, make_request, with_root_path
from vocabulary.spec.backends import BackendConfig


class AsyncTicks:
    async def __call__(self, request: Request) -> AsyncIterator[str]:
        async def ticks() -> AsyncIterator[str]:
            for n in range(3):
                yield f"{n};"
                await asyncio.sleep(0.01)

        return ticks()


class AsyncGeneratorHandler:
    async def __call__(self, request: Request) -> AsyncIterator[bytes]:
        for chunk in (b"x", b"y"):
            yield chunk


def sync_ticks(request: Request) -> Iterator[bytes]:
    yield from (b"a", b"b", b"c")


class Firehose:
    """Chunks produced far faster than anyone reads them."""

    async def __call__(self, request: Request) -> AsyncIterator[bytes]:
        for n in range(200):
            yield b"%03d," % n


class RoleThenTokens:
    """An OpenAI chat stream's shape: its role and first token sent at once, the next token later."""

    async def __call__(self, request: Request) -> AsyncIterator[bytes]:
        yield b"data: {role}\n\n"
        yield b"data: {token 1}\n\n"
        await asyncio.sleep(0.05)
        yield b"data: {token 2}\n\n"


class Engine:
    """An LLM engine on a CPU: a token, then a turn of the loop for others, 200 times."""

    async def __call__(self, request: Request) -> AsyncIterator[bytes]:
        for n in range(200):
            yield b"data: token %03d\n\n" % n
            await asyncio.sleep(0)


class Paced:
    """Server-sent events 5 ms apart."""

    async def __call__(self, request: Request) -> AsyncIterator[bytes]:
        for n in range(10):
            yield b"data: %d\n\n" % n
            await asyncio.sleep(0.005)


class EventStream:
    async def __call__(self, request: Request) -> StreamingResponse:
        async def events() -> AsyncIterator[str]:
            yield "data: 1\n\n"
            yield "data: 2\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")


api = FastAPI()


@api.get("/where")
def where(request: Request) -> dict[str, str]:
    return {"root_path": request.scope["root_path"], "path": request.url.path}


lifecycle: list[str] = []


@contextlib.asynccontextmanager
async def loaded(app: FastAPI) -> AsyncIterator[None]:
    lifecycle.append("startup")
    yield
    lifecycle.append("shutdown")


with_lifespan = FastAPI(lifespan=loaded)


@with_lifespan.get("/seen")
def seen() -> list[str]:
    return lifecycle


@contextlib.asynccontextmanager
async def broken(app: FastAPI) -> AsyncIterator[None]:
    raise RuntimeError("no model file")
    yield


failing_startup = FastAPI(lifespan=broken)


class AsgiClass:
    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        raise NotImplementedError


async def streamed(target: str) -> tuple[StreamStart, list[bytes]]:
    replica = Replica(BackendConfig(name="b", version="v1", import_path=f"{__name__}:{target}"), "r1")
    await replica.initialize()
    start = await replica.handle_request(make_request("GET", "/s"))
    assert isinstance(start, StreamStart)
    return start, [chunk async for chunk in replica.stream(start.stream_id)]


def test_an_async_generator_streams_its_chunks_as_text() -> None:
    start, rest = asyncio.run(streamed("AsyncTicks"))
    assert (start.status, start.first_chunk, rest) == (200, b"0;", [b"1;", b"2;"])
    assert (b"content-type", b"text/plain; charset=utf-8") in start.headers


def test_a_handler_that_is_an_async_generator_streams_what_it_yields() -> None:
    start, rest = asyncio.run(streamed("AsyncGeneratorHandler"))
    assert start.first_chunk + b"".join(rest) == b"xy"


def test_a_sync_generator_streams_its_chunks() -> None:
    start, rest = asyncio.run(streamed("sync_ticks"))
    assert start.first_chunk + b"".join(rest) == b"abc"


def test_chunks_a_fast_producer_has_ready_travel_together_in_order() -> None:
    async def scenario() -> tuple[StreamStart, list[bytes]]:
        replica = Replica(BackendConfig(name="b", version="v1", import_path=f"{__name__}:Firehose"), "r1")
        await replica.initialize()
        start = await replica.handle_request(make_request("GET", "/s"))
        assert isinstance(start, StreamStart)
        await asyncio.sleep(0.05)  # the proxy is slower than the app: chunks queue up
        return start, [chunk async for chunk in replica.stream(start.stream_id)]

    start, rest = asyncio.run(scenario())
    assert start.first_chunk + b"".join(rest) == b"".join(b"%03d," % n for n in range(200))
    # 199 chunks left, sent as a handful of items: each joins what the app had waiting (at most _AHEAD_MESSAGES).
    assert len(rest) <= 199 // _AHEAD_MESSAGES + 2


def test_a_producer_that_yields_a_token_a_turn_has_its_tokens_gathered_into_few_items() -> None:
    # Read as the data link reads it (one item, then the next): without gathering, each of
    # the 199 tokens after the first went as an item of its own, a write on every hop.
    start, rest = asyncio.run(streamed("Engine"))
    assert start.first_chunk + b"".join(rest) == b"".join(b"data: token %03d\n\n" % n for n in range(200))
    assert len(rest) <= 199 // _GATHER_MOST + 3


def test_chunks_milliseconds_apart_each_leave_at_once_as_an_item_of_their_own() -> None:
    start, rest = asyncio.run(streamed("Paced"))
    assert start.first_chunk + b"".join(rest) == b"".join(b"data: %d\n\n" % n for n in range(10))
    assert rest == [b"data: %d\n\n" % n for n in range(1, 10)]


def test_the_first_chunk_carries_what_the_app_had_sent_with_it() -> None:
    # The rest is claimed one round trip after the head: a first token sent right behind the
    # role would otherwise wait for that trip (time to first token).
    start, rest = asyncio.run(streamed("RoleThenTokens"))
    assert start.first_chunk == b"data: {role}\n\ndata: {token 1}\n\n"
    assert rest == [b"data: {token 2}\n\n"]


def test_a_stream_the_app_ended_within_its_first_chunk_has_no_rest() -> None:
    start, rest = asyncio.run(streamed("AsyncGeneratorHandler"))  # yields twice, never waits
    assert (start.first_chunk, rest) == (b"xy", [])


def test_a_streaming_response_keeps_its_media_type() -> None:
    start, rest = asyncio.run(streamed("EventStream"))
    assert (b"content-type", b"text/event-stream; charset=utf-8") in start.headers
    assert start.first_chunk + b"".join(rest) == b"data: 1\n\ndata: 2\n\n"


def test_an_asgi_app_sees_the_route_prefix_as_its_root_path() -> None:
    async def scenario() -> Any:
        replica = Replica(BackendConfig(name="b", version="v1", import_path=f"{__name__}:api"), "r1")
        await replica.initialize()
        return await replica.handle_request(make_request("GET", "/api/where", headers=with_root_path([], "/api")))

    status, _, body = asyncio.run(scenario())
    assert (status, body) == (200, b'{"root_path":"/api","path":"/api/where"}')


def test_apps_and_asgi_classes_count_as_asgi_apps_and_handlers_do_not() -> None:
    assert is_asgi_app(api) and is_asgi_app(AsgiClass())
    assert not is_asgi_app(AsyncTicks()) and not is_asgi_app(sync_ticks) and not is_asgi_app(EventStream())


def test_a_stream_nobody_claims_in_time_is_closed() -> None:
    async def scenario() -> bool:
        closed = asyncio.Event()

        async def rest() -> AsyncIterator[bytes]:
            try:
                yield b"never read"
            finally:
                closed.set()

        table = StreamTable("r1", unclaimed_s=0.01)
        body = rest()
        await body.__anext__()  # started, as a stream the replica holds is
        stream_id = table.hold(body)
        await asyncio.wait_for(closed.wait(), 5)
        return table.claim(stream_id) is None

    assert asyncio.run(scenario())


def test_an_apps_startup_runs_before_its_first_request_and_its_shutdown_when_the_replica_drains() -> None:
    async def scenario() -> tuple[Any, list[str]]:
        replica = Replica(BackendConfig(name="b", version="v1", import_path=f"{__name__}:with_lifespan"), "r1")
        await replica.initialize()
        answer = await replica.handle_request(make_request("GET", "/seen"))
        await replica.prepare_for_shutdown(0)
        return answer, list(lifecycle)

    lifecycle.clear()
    (status, _, body), after = asyncio.run(scenario())
    assert (status, body, after) == (200, b'["startup"]', ["startup", "shutdown"])


def test_an_app_whose_startup_fails_never_becomes_ready_and_says_why() -> None:
    replica = Replica(BackendConfig(name="b", version="v1", import_path=f"{__name__}:failing_startup"), "r1")
    with pytest.raises(Exception, match="no model file"):
        asyncio.run(replica.initialize())


class Endless:
    """Chunks until stopped (records that it was); or, on /boom, two chunks and a failure."""

    stopped: asyncio.Event | None = None
    made = 0

    async def __call__(self, request: Request) -> AsyncIterator[bytes]:
        assert Endless.stopped is not None
        try:
            while True:
                Endless.made += 1
                if request.url.path == "/boom" and Endless.made > 2:
                    raise ValueError("the model exploded mid-stream")
                yield b"."
                await asyncio.sleep(0)
        finally:
            Endless.stopped.set()


def test_a_handler_that_raises_mid_stream_ends_its_stream_with_its_error() -> None:
    async def scenario() -> list[bytes]:
        Endless.stopped, Endless.made = asyncio.Event(), 0
        replica = Replica(BackendConfig(name="b", version="v1", import_path=f"{__name__}:Endless"), "r1")
        await replica.initialize()
        start = await replica.handle_request(make_request("GET", "/boom"))
        assert isinstance(start, StreamStart)
        chunks: list[bytes] = []
        with pytest.raises(ValueError, match="the model exploded mid-stream"):
            async for chunk in replica.stream(start.stream_id):
                chunks.append(chunk)
        return [start.first_chunk, *chunks]

    assert b"".join(asyncio.run(scenario())) == b".."


def test_a_stream_that_is_never_read_stops_its_app_when_let_go_and_waits_meanwhile() -> None:
    async def scenario() -> None:
        Endless.stopped, Endless.made = asyncio.Event(), 0
        replica = Replica(BackendConfig(name="b", version="v1", import_path=f"{__name__}:Endless"), "r1")
        await replica.initialize()
        start = await replica.handle_request(make_request("GET", "/"))
        assert isinstance(start, StreamStart)
        made = -1
        while Endless.made != made:  # an app that never stops fails by the timeout below
            made = Endless.made
            await asyncio.sleep(0.1)
        assert made <= 100  # unread, the app waits a few chunks ahead instead of filling memory
        replica.close_stream(start.stream_id)
        await Endless.stopped.wait()

    asyncio.run(asyncio.wait_for(scenario(), 60))
