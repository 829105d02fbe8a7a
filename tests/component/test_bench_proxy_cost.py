"""bench.proxy_cost drives GETs through the proxy's server and app in one process and answers them
(no Ray, no valgrind): its figure is the cost of requests that were served, not refused."""

from __future__ import annotations

import asyncio

from bench.proxy_cost import ANSWER, _Caller, _frozen, post, serve


def test_every_get_is_answered_and_costs_some_cpu() -> None:
    costs = asyncio.run(serve(200, 2))
    assert len(costs) == 2 and all(cost > 0 for cost in costs)


def test_every_post_is_answered_with_its_body_read() -> None:
    # A refused POST (413, 408) would be answered too, but closes the connection: the driver raises.
    costs = asyncio.run(serve(200, 1, request=post(1024)))
    assert len(costs) == 1 and costs[0] > 0


def test_on_the_frozen_clock_the_fake_replica_still_answers() -> None:
    async def one() -> object:
        return await _Caller().call(None, ("GET", "/", b"", [], b""), 1.0)

    assert asyncio.run(_frozen(one())) == ANSWER
