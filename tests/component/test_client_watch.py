"""A client that leaves a slow request cancels its call; quick requests never watch; one sweep serves them all."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from proxy.client_watch import ClientLeft, ClientWatch

AFTER_S = 0.02


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


def test_a_client_that_leaves_a_slow_request_cancels_its_work() -> None:
    async def scenario() -> None:
        watch, client, cancelled = ClientWatch(AFTER_S), Client(), asyncio.Event()

        async def slow() -> str:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                cancelled.set()
                raise
            return "answer"

        request = asyncio.ensure_future(watch.unless_client_leaves(client.receive, slow()))
        await asyncio.sleep(AFTER_S * 2)  # past the watch's start, its sweep included
        assert client.asked == 1 and watch.watching() == 1
        client.leave()
        with pytest.raises(ClientLeft):
            await request
        assert cancelled.is_set() and watch.running() == 0

    asyncio.run(scenario())


def test_quick_requests_never_ask_for_the_clients_messages() -> None:
    async def scenario() -> None:
        watch = ClientWatch(AFTER_S)
        clients = [Client() for _ in range(50)]

        async def quick(n: int) -> int:
            await asyncio.sleep(0)
            return n

        answers = await asyncio.gather(*(watch.unless_client_leaves(c.receive, quick(n)) for n, c in enumerate(clients)))
        assert answers == list(range(50))
        await asyncio.sleep(AFTER_S * 2)  # the sweep finds nothing to watch and stops
        assert [c.asked for c in clients] == [0] * 50 and watch.running() == 0

    asyncio.run(scenario())


def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    async def scenario() -> None:
        watch, client = ClientWatch(AFTER_S), Client()
        request = asyncio.ensure_future(watch.unless_client_leaves(client.receive, asyncio.sleep(10)))
        await asyncio.sleep(AFTER_S * 2)
        request.cancel()  # e.g. the server shutting down, the client still there
        with pytest.raises(asyncio.CancelledError):
            await request
        assert watch.running() == 0

    asyncio.run(scenario())


def test_requests_started_at_different_times_each_watch_once_past_their_own_start() -> None:
    after = 0.2  # wide enough that a busy machine's scheduling delays cannot blur the two starts

    async def scenario() -> None:
        watch = ClientWatch(after)
        early, late = Client(), Client()
        first = asyncio.ensure_future(watch.unless_client_leaves(early.receive, asyncio.sleep(after * 4)))
        await asyncio.sleep(after * 2)
        second = asyncio.ensure_future(watch.unless_client_leaves(late.receive, asyncio.sleep(after * 4)))
        await asyncio.sleep(0)
        assert early.asked == 1 and late.asked == 0  # the late one has not run long enough yet
        await asyncio.sleep(after * 2)
        assert late.asked == 1
        await asyncio.gather(first, second)
        assert early.asked == 1 and late.asked == 1  # each asked once, however many sweeps passed

    asyncio.run(scenario())
