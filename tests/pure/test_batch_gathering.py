"""A batched backend's requests are gathered into lists for its handler."""

from __future__ import annotations

import asyncio

from proxy.pool.calling import Batching, HandlerError
from proxy.pool.gathering import Gatherer
from vocabulary.control.actor_apis import ReplicaHandle
from vocabulary.request_path.wire import CallOutcome, CallResult, TimedRequest, WireResponse, make_request


class ListTransport:
    """A batched handler that answers each request with its path."""

    def __init__(self) -> None:
        self.lists: list[list[str]] = []
        self.results: list[CallResult] | None = None

    async def batch(self, handle: ReplicaHandle, items: list[TimedRequest]) -> list[CallResult]:
        self.lists.append([request[1] for request, _ in items])
        if self.results is not None:
            return self.results
        return [(CallOutcome.OK, (200, [], request[1].encode())) for request, _ in items]


def batching(size: int, wait_s: float = 0.01) -> Batching:
    return Batching("model", size, wait_s)


async def burst(gatherer: Gatherer, paths: list[str], settings: Batching) -> list[WireResponse]:
    calls = [gatherer.call("r", make_request("POST", path), 10, settings) for path in paths]
    return list(await asyncio.gather(*calls))


def test_a_lone_request_is_a_batch_of_one_after_the_wait() -> None:
    async def scenario() -> tuple[ListTransport, float]:
        transport = ListTransport()
        loop = asyncio.get_running_loop()
        started = loop.time()
        await Gatherer(transport.batch).call("r", make_request("GET", "/a"), 10, batching(8, 0.05))
        return transport, loop.time() - started

    transport, waited = asyncio.run(scenario())
    assert transport.lists == [["/a"]] and waited >= 0.05


def test_requests_arriving_together_share_one_call_in_their_order() -> None:
    async def scenario() -> tuple[ListTransport, list[WireResponse]]:
        transport = ListTransport()
        answers = await burst(Gatherer(transport.batch), ["/0", "/1", "/2"], batching(8))
        return transport, answers

    transport, answers = asyncio.run(scenario())
    assert transport.lists == [["/0", "/1", "/2"]]
    assert answers == [(200, [], b"/0"), (200, [], b"/1"), (200, [], b"/2")]


def test_a_full_batch_leaves_at_once_and_the_rest_follows_after_the_wait() -> None:
    async def scenario() -> ListTransport:
        transport = ListTransport()
        await burst(Gatherer(transport.batch), [f"/{i}" for i in range(5)], batching(2, 0.01))
        return transport

    assert asyncio.run(scenario()).lists == [["/0", "/1"], ["/2", "/3"], ["/4"]]


def test_a_new_max_batch_size_applies_to_the_next_batch() -> None:
    async def scenario() -> ListTransport:
        transport = ListTransport()
        gatherer = Gatherer(transport.batch)
        await burst(gatherer, [f"/{i}" for i in range(4)], batching(4))
        await burst(gatherer, [f"/{i}" for i in range(4)], batching(2))
        return transport

    assert [len(sent) for sent in asyncio.run(scenario()).lists] == [4, 2, 2]


def test_each_batch_size_is_observed_for_its_backend() -> None:
    seen: list[tuple[str, int]] = []

    async def scenario() -> None:
        await burst(Gatherer(ListTransport().batch, lambda b, n: seen.append((b, n))), ["/a", "/b", "/c"], batching(2))

    asyncio.run(scenario())
    assert seen == [("model", 2), ("model", 1)]


def test_a_failed_batch_fails_every_request_of_it() -> None:
    async def scenario() -> list[BaseException | WireResponse]:
        transport = ListTransport()
        transport.results = [(CallOutcome.ERROR, "wrong length")] * 2
        gatherer = Gatherer(transport.batch)
        calls = [gatherer.call("r", make_request("GET", f"/{i}"), 10, batching(2)) for i in range(2)]
        return list(await asyncio.gather(*calls, return_exceptions=True))

    outcomes = asyncio.run(scenario())
    assert all(isinstance(o, HandlerError) and "wrong length" in str(o) for o in outcomes)


def test_a_request_cancelled_while_waiting_is_left_out_of_the_batch() -> None:
    async def scenario() -> ListTransport:
        transport = ListTransport()
        gatherer = Gatherer(transport.batch)
        settings = batching(8, 0.05)
        leaving = asyncio.ensure_future(gatherer.call("r", make_request("GET", "/gone"), 10, settings))
        staying = asyncio.ensure_future(gatherer.call("r", make_request("GET", "/kept"), 10, settings))
        await asyncio.sleep(0)
        leaving.cancel()
        await staying
        return transport

    assert asyncio.run(scenario()).lists == [["/kept"]]
