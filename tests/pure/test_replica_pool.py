"""Replica pools: the per-replica cap, the bounded wait queue, dead replicas."""

from __future__ import annotations

import asyncio
import random

import pytest

from proxy.pool.replicas import REPLACEMENT_WAIT_S, NoReplicaError, QueueFullError, ReplicaPool


def pool(replicas: int, cap: int, max_queued: int = 2) -> ReplicaPool:
    p = ReplicaPool("b", random.Random(0), max_queued)
    p.update(cap, [(f"r{i}", f"handle-{i}") for i in range(replicas)])
    return p


def run(coro):
    return asyncio.run(coro)


def test_no_replica_is_refused_at_once() -> None:
    async def scenario() -> None:
        with pytest.raises(NoReplicaError):
            await pool(0, 1).acquire()

    run(scenario())


def test_a_replica_never_gets_more_than_its_cap() -> None:
    async def scenario() -> list[int]:
        p = pool(2, cap=2, max_queued=0)
        for _ in range(4):
            await p.acquire()
        with pytest.raises(QueueFullError):
            await p.acquire()
        return sorted(slot.in_flight for slot in p._slots)

    assert run(scenario()) == [2, 2]


def test_a_waiting_request_gets_the_slot_released_first() -> None:
    async def scenario() -> str:
        p = pool(1, cap=1)
        first = await p.acquire()
        waiter = asyncio.ensure_future(p.acquire())
        await asyncio.sleep(0)
        assert p.queued() == 1 and not waiter.done()
        p.release(first)
        slot = await waiter
        return slot.replica_id

    assert run(scenario()) == "r0"


def test_requests_past_the_queue_bound_are_rejected() -> None:
    async def scenario() -> None:
        p = pool(1, cap=1, max_queued=1)
        await p.acquire()
        waiting = asyncio.ensure_future(p.acquire())
        await asyncio.sleep(0)
        with pytest.raises(QueueFullError):
            await p.acquire()
        waiting.cancel()

    run(scenario())


def test_a_cancelled_waiter_leaves_the_queue() -> None:
    async def scenario() -> int:
        p = pool(1, cap=1)
        await p.acquire()
        waiting = asyncio.ensure_future(p.acquire())
        await asyncio.sleep(0)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        return p.queued()

    assert run(scenario()) == 0


def test_a_dropped_replica_is_not_chosen_even_if_the_controller_still_lists_it() -> None:
    async def scenario() -> set[str]:
        p = pool(2, cap=10)
        slot = await p.acquire()
        p.drop(slot)
        p.release(slot)
        p.update(10, [("r0", "h0"), ("r1", "h1")])
        return {(await p.acquire()).replica_id for _ in range(10)}

    chosen = run(scenario())
    assert len(chosen) == 1


def test_a_dropped_replica_returns_once_the_controller_forgot_it() -> None:
    async def scenario() -> list[str]:
        p = pool(1, cap=10)
        slot = await p.acquire()
        p.drop(slot)
        p.update(10, [])
        p.update(10, [("r0", "h0")])
        return p.replica_ids()

    assert run(scenario()) == ["r0"]


def test_waiters_are_refused_when_the_last_replica_goes() -> None:
    async def scenario() -> None:
        p = pool(1, cap=1)
        await p.acquire()
        waiting = asyncio.ensure_future(p.acquire())
        await asyncio.sleep(0)
        p.update(1, [])
        with pytest.raises(NoReplicaError):
            await waiting

    run(scenario())


def test_in_flight_counts_survive_a_replica_set_update() -> None:
    async def scenario() -> tuple[int, str]:
        p = pool(1, cap=1)
        await p.acquire()
        p.update(1, [("r0", "h0"), ("r9", "h9")])
        second = await p.acquire()
        return p.ongoing(), second.replica_id

    assert run(scenario()) == (2, "r9")


def test_a_new_replica_serves_waiting_requests() -> None:
    async def scenario() -> str:
        p = pool(1, cap=1)
        await p.acquire()
        waiting = asyncio.ensure_future(p.acquire())
        await asyncio.sleep(0)
        p.update(1, [("r0", "h0"), ("r1", "h1")])
        return (await waiting).replica_id

    assert run(scenario()) == "r1"


def test_shadow_acquire_never_waits() -> None:
    async def scenario() -> object:
        p = pool(1, cap=1)
        await p.acquire()
        return p.try_acquire()

    assert run(scenario()) is None


def test_requests_turned_away_for_want_of_a_replica_are_demand_for_a_second() -> None:
    now = [100.0]
    p = ReplicaPool("b", random.Random(0), 2, clock=lambda: now[0])

    async def scenario() -> None:
        with pytest.raises(NoReplicaError):
            await p.acquire()

    run(scenario())
    assert p.try_acquire() is None
    assert p.unserved() == 2
    now[0] += 1.5
    assert p.unserved() == 0


def test_when_drops_take_the_last_replica_requests_wait_for_its_replacement() -> None:
    # The controller replaces a replica that died or stalled; its proxy holds the requests meanwhile.
    async def scenario() -> tuple[int, str]:
        p = pool(1, cap=10)
        slot = await p.acquire()
        p.drop(slot)  # e.g. stalled under this request
        p.release(slot)
        waiting = asyncio.ensure_future(p.acquire())
        await asyncio.sleep(0)
        p.update(10, [])  # the controller stopped it; its replacement is starting
        await asyncio.sleep(0.01)
        queued = p.queued()
        p.update(10, [("r1", "h1")])
        return queued, (await waiting).replica_id

    assert run(scenario()) == (1, "r1")


def test_the_wait_for_a_replacement_ends_replacement_wait_s_after_the_last_replica_went() -> None:
    now = [100.0]
    p = ReplicaPool("b", random.Random(0), 10, clock=lambda: now[0])
    p.update(10, [("r0", "h0")])

    async def scenario() -> None:
        p.drop(await p.acquire())
        now[0] += REPLACEMENT_WAIT_S + 0.1
        with pytest.raises(NoReplicaError):
            await p.acquire()  # still none long after: 503 at once, as for a backend that never had one

    run(scenario())


def test_a_backend_that_never_had_a_replica_still_refuses_at_once() -> None:
    async def scenario() -> None:
        p = pool(1, cap=10)
        p.update(10, [])
        with pytest.raises(NoReplicaError):
            await asyncio.wait_for(p.acquire(), 1.0)

    run(scenario())
