"""A call past its deadline or whose client left is cancelled; quick calls never watch; one sweep serves them all."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, TypeVar

import pytest

from proxy.pipeline.running_calls import ClientLeft, RunningCalls

AFTER_S = 0.02
FAR = float("inf")  # no deadline
T = TypeVar("T")


async def run(calls: RunningCalls, receive: Any, deadline_at: float, work: Awaitable[T], watch: bool = True) -> T:
    """`work` as the proxy's request path runs its call (or, not `watch`ing, reads a body): between
    `enter` and `leave`, a cancellation of the sweep's raised as what it meant."""
    running = calls.enter(receive, deadline_at - asyncio.get_running_loop().time(), watch)
    try:
        return await work
    except asyncio.CancelledError:
        instead = calls.why_cancelled(running)
        if instead is None:
            raise
        raise instead from None
    finally:
        calls.leave(running)


class Client:
    """An ASGI `receive` whose only message, once asked, is the disconnect when `leave()` is called."""

    def __init__(self) -> None:
        self.asked = 0
        self._left = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        self.asked += 1
        await self._left.wait()
        return {"type": "http.disconnect"}

    def leave(self) -> None:
        self._left.set()


async def slow(cancelled: asyncio.Event) -> None:
    """Work that would run for 10 s; sets `cancelled` when it is cancelled instead."""
    try:
        await asyncio.sleep(10)
    except asyncio.CancelledError:
        cancelled.set()
        raise


def test_a_client_that_leaves_a_slow_request_cancels_its_work() -> None:
    async def scenario() -> None:
        calls, client, cancelled = RunningCalls(AFTER_S), Client(), asyncio.Event()
        request = asyncio.ensure_future(run(calls, client.receive, FAR, slow(cancelled)))
        await asyncio.sleep(AFTER_S * 2)  # past the watch's start, its sweep included
        assert client.asked == 1 and calls.watching() == 1
        client.leave()
        with pytest.raises(ClientLeft):
            await request
        assert cancelled.is_set() and calls.running() == 0

    asyncio.run(scenario())


def test_quick_requests_never_ask_for_the_clients_messages() -> None:
    async def scenario() -> None:
        calls = RunningCalls(AFTER_S)
        clients = [Client() for _ in range(50)]

        async def quick(n: int) -> int:
            await asyncio.sleep(0)
            return n

        answers = await asyncio.gather(*(run(calls, c.receive, FAR, quick(n)) for n, c in enumerate(clients)))
        assert answers == list(range(50))
        await asyncio.sleep(AFTER_S * 2)  # the sweep finds nothing to watch and stops
        assert [c.asked for c in clients] == [0] * 50 and calls.running() == 0

    asyncio.run(scenario())


def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    async def scenario() -> None:
        calls, client = RunningCalls(AFTER_S), Client()
        request = asyncio.ensure_future(run(calls, client.receive, FAR, asyncio.sleep(10)))
        await asyncio.sleep(AFTER_S * 2)
        request.cancel()  # e.g. the server shutting down, the client still there
        with pytest.raises(asyncio.CancelledError):
            await request
        assert calls.running() == 0

    asyncio.run(scenario())


def test_requests_started_at_different_times_each_watch_once_past_their_own_start() -> None:
    after = 0.2  # wide enough that a busy machine's scheduling delays cannot blur the two starts

    async def scenario() -> None:
        calls = RunningCalls(after)
        early, late = Client(), Client()
        first = asyncio.ensure_future(run(calls, early.receive, FAR, asyncio.sleep(after * 4)))
        await asyncio.sleep(after * 2)
        second = asyncio.ensure_future(run(calls, late.receive, FAR, asyncio.sleep(after * 4)))
        await asyncio.sleep(0)
        assert early.asked == 1 and late.asked == 0  # the late one has not run long enough yet
        await asyncio.sleep(after * 2)
        assert late.asked == 1
        await asyncio.gather(first, second)
        assert early.asked == 1 and late.asked == 1  # each asked once, however many sweeps passed

    asyncio.run(scenario())


def test_a_call_past_its_deadline_is_cancelled_and_times_out() -> None:
    async def scenario() -> None:
        calls, client, cancelled = RunningCalls(AFTER_S), Client(), asyncio.Event()
        loop = asyncio.get_running_loop()
        with pytest.raises(TimeoutError):
            await run(calls, client.receive, loop.time() + AFTER_S * 3, slow(cancelled))
        assert cancelled.is_set() and calls.running() == 0

    asyncio.run(scenario())


def test_a_deadline_nearer_than_the_next_sweep_fires_first() -> None:
    after = 1.0  # sweeps every 0.5 s

    async def scenario() -> None:
        calls, client = RunningCalls(after), Client()
        loop = asyncio.get_running_loop()
        late = asyncio.ensure_future(run(calls, client.receive, FAR, asyncio.sleep(after * 2)))  # arms the sweep
        await asyncio.sleep(0)
        order: list[str] = []

        async def short() -> None:
            try:
                await run(calls, client.receive, loop.time() + 0.01, asyncio.sleep(10))
            except TimeoutError:
                order.append("deadline")

        async def marker() -> None:
            await asyncio.sleep(0.1)  # well before the next sweep, well after the deadline
            order.append("marker")

        await asyncio.gather(short(), marker())
        assert order == ["deadline", "marker"]
        late.cancel()
        with pytest.raises(asyncio.CancelledError):
            await late

    asyncio.run(scenario())


def test_a_call_that_answers_in_time_is_untouched_by_its_deadline() -> None:
    async def scenario() -> None:
        calls, client = RunningCalls(AFTER_S), Client()
        loop = asyncio.get_running_loop()
        assert await run(calls, client.receive, loop.time() + 5, asyncio.sleep(AFTER_S * 3, "answer")) == "answer"
        assert client.asked == 1  # watched meanwhile, as a call past AFTER_S is

    asyncio.run(scenario())


def test_a_body_read_is_held_to_its_deadline_and_never_asks_for_its_clients_messages() -> None:
    # A body read is entered with watch=False: a watch would take the body's own messages.
    async def scenario() -> None:
        calls, client, cancelled = RunningCalls(AFTER_S), Client(), asyncio.Event()
        loop = asyncio.get_running_loop()
        deadline_at = loop.time() + AFTER_S * 5
        reading = asyncio.ensure_future(run(calls, client.receive, deadline_at, slow(cancelled), watch=False))
        await asyncio.sleep(AFTER_S * 3)  # well past when a call would start watching
        assert client.asked == 0 and calls.watching() == 0 and calls.running() == 1
        with pytest.raises(TimeoutError):
            await reading
        assert cancelled.is_set() and loop.time() >= deadline_at - 0.002 and calls.running() == 0

    asyncio.run(scenario())
