"""Request coalescing: one call when idle, shared batch calls under load."""

from __future__ import annotations

import asyncio
from typing import Any

from proxy.pool.calling import HandlerError, ReplicaDiedError
from proxy.pool.coalescing import Coalescer
from vocabulary.control.actor_apis import ReplicaHandle
from vocabulary.request_path.wire import CallOutcome, CallResult, TimedRequest, WireRequest, WireResponse, make_request

WINDOW_S = 0.05


class FakeTransport:
    """Answers each request with its path; `hold` keeps single calls open."""

    def __init__(self) -> None:
        self.singles: list[str] = []
        self.batches: list[list[tuple[str, float]]] = []
        self.hold = asyncio.Event()
        self.hold.set()
        self.batch_results: list[CallResult] | None = None
        self.dead = False

    async def one(self, handle: ReplicaHandle, request: WireRequest) -> WireResponse:
        self.singles.append(request[1])
        await self.hold.wait()
        return 200, [], request[1].encode()

    async def coalesced(self, handle: ReplicaHandle, items: list[TimedRequest]) -> list[CallResult]:
        self.batches.append([(request[1], limit) for request, limit in items])
        if self.dead:
            raise ReplicaDiedError("gone")
        if self.batch_results is not None:
            return self.batch_results
        return [(CallOutcome.OK, (200, [], request[1].encode())) for request, _ in items]


def get(path: str) -> WireRequest:
    return make_request("GET", path)


async def busy_replica(transport: FakeTransport, coalescer: Coalescer) -> asyncio.Future[WireResponse]:
    """One long single call in flight, so the next requests wait in the outbox."""
    transport.hold.clear()
    first = asyncio.ensure_future(coalescer.call("r", get("/first"), 10))
    await asyncio.sleep(0)
    return first


def test_an_idle_replica_gets_each_request_as_its_own_call() -> None:
    async def scenario() -> FakeTransport:
        transport = FakeTransport()
        coalescer = Coalescer(transport, max_calls=1, window_s=WINDOW_S)
        assert await coalescer.call("r", get("/a"), 10) == (200, [], b"/a")
        assert await coalescer.call("r", get("/b"), 10) == (200, [], b"/b")
        return transport

    transport = asyncio.run(scenario())
    assert transport.singles == ["/a", "/b"] and transport.batches == []


def test_requests_queued_behind_a_call_leave_together_and_get_their_own_answers() -> None:
    async def scenario() -> tuple[FakeTransport, list[WireResponse]]:
        transport = FakeTransport()
        coalescer = Coalescer(transport, max_calls=1, window_s=10)
        first = await busy_replica(transport, coalescer)
        queued = [asyncio.ensure_future(coalescer.call("r", get(f"/{i}"), 10)) for i in range(3)]
        await asyncio.sleep(0)
        transport.hold.set()
        answers = [await q for q in queued]
        await first
        return transport, answers

    transport, answers = asyncio.run(scenario())
    assert [path for path, _ in transport.batches[0]] == ["/0", "/1", "/2"]
    assert answers == [(200, [], b"/0"), (200, [], b"/1"), (200, [], b"/2")]


def test_a_slow_call_holds_back_the_requests_behind_it_for_one_window_at_most() -> None:
    async def scenario() -> float:
        transport = FakeTransport()
        coalescer = Coalescer(transport, max_calls=1, window_s=WINDOW_S)
        first = await busy_replica(transport, coalescer)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await coalescer.call("r", get("/next"), 10)
        waited = loop.time() - started
        transport.hold.set()
        await first
        return waited

    assert asyncio.run(scenario()) < WINDOW_S + 0.5


def test_a_batched_request_carries_the_time_it_has_left() -> None:
    async def scenario() -> float:
        transport = FakeTransport()
        coalescer = Coalescer(transport, max_calls=1, window_s=WINDOW_S)
        first = await busy_replica(transport, coalescer)
        await coalescer.call("r", get("/next"), 3.0)
        transport.hold.set()
        await first
        return transport.batches[0][0][1]

    assert 2.5 < asyncio.run(scenario()) <= 3.0


def test_a_request_cancelled_while_queued_is_never_sent() -> None:
    async def scenario() -> FakeTransport:
        transport = FakeTransport()
        coalescer = Coalescer(transport, max_calls=1, window_s=10)
        first = await busy_replica(transport, coalescer)
        dropped = asyncio.ensure_future(coalescer.call("r", get("/dropped"), 10))
        kept = asyncio.ensure_future(coalescer.call("r", get("/kept"), 10))
        await asyncio.sleep(0)
        dropped.cancel()
        transport.hold.set()
        await kept
        await first
        return transport

    assert [path for path, _ in asyncio.run(scenario()).batches[0]] == ["/kept"]


def test_each_batched_request_gets_its_own_error_or_timeout() -> None:
    async def scenario() -> list[Any]:
        transport = FakeTransport()
        transport.batch_results = [
            (CallOutcome.OK, (200, [], b"fine")),
            (CallOutcome.ERROR, "Traceback: boom"),
            (CallOutcome.TIMEOUT, ""),
        ]
        coalescer = Coalescer(transport, max_calls=1, window_s=10)
        first = await busy_replica(transport, coalescer)
        queued = [asyncio.ensure_future(coalescer.call("r", get(f"/{i}"), 10)) for i in range(3)]
        await asyncio.sleep(0)
        transport.hold.set()
        await first
        return await asyncio.gather(*queued, return_exceptions=True)

    fine, error, timeout = asyncio.run(scenario())
    assert fine == (200, [], b"fine")
    assert isinstance(error, HandlerError) and "boom" in str(error)
    assert isinstance(timeout, TimeoutError)


def test_a_replica_dying_under_a_batch_fails_every_request_in_it_as_replica_died() -> None:
    async def scenario() -> list[Any]:
        transport = FakeTransport()
        transport.dead = True
        coalescer = Coalescer(transport, max_calls=1, window_s=10)
        first = await busy_replica(transport, coalescer)
        queued = [asyncio.ensure_future(coalescer.call("r", get(f"/{i}"), 10)) for i in range(2)]
        await asyncio.sleep(0)
        transport.hold.set()
        await first
        return await asyncio.gather(*queued, return_exceptions=True)

    assert all(isinstance(result, ReplicaDiedError) for result in asyncio.run(scenario()))


def test_replicas_are_coalesced_separately() -> None:
    async def scenario() -> FakeTransport:
        transport = FakeTransport()
        coalescer = Coalescer(transport, max_calls=1, window_s=10)
        transport.hold.clear()
        calls = [asyncio.ensure_future(coalescer.call(f"r{i}", get(f"/{i}"), 10)) for i in range(2)]
        await asyncio.sleep(0)
        transport.hold.set()
        await asyncio.gather(*calls)
        return transport

    transport = asyncio.run(scenario())
    assert sorted(transport.singles) == ["/0", "/1"] and transport.batches == []
