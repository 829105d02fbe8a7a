"""The long-poll host: only changed keys, stale ids get fresh data, acks per proxy."""

from __future__ import annotations

import asyncio
import pickle

from controller.state.longpoll import LongPollHost
from vocabulary.control.longpoll import RouteEntry, RouteTable
from vocabulary.spec.endpoints import EndpointConfig


def endpoint(i: int, weight: float = 1.0) -> EndpointConfig:
    traffic = {f"b{i}": weight} if weight == 1.0 else {f"b{i}": weight, "other": 1 - weight}
    return EndpointConfig(name=f"e{i}", route=f"/e{i}", traffic=traffic)


def host_with(n: int) -> LongPollHost:
    host = LongPollHost(first_id=0)
    for i in range(n):
        host.publish(f"endpoint:e{i}", endpoint(i), endpoint(i))
    return host


def test_listener_receives_only_keys_whose_snapshot_changed():
    host = host_with(3)
    held = {key: host.snapshot_id(key) for key in host.keys()}
    host.publish("endpoint:e1", endpoint(1, 0.5), endpoint(1, 0.5))
    updates = host.updates_for(held)
    assert list(updates) == ["endpoint:e1"]


def test_publishing_an_unchanged_value_creates_no_snapshot():
    host = host_with(1)
    before = host.snapshot_id("endpoint:e0")
    assert host.publish("endpoint:e0", endpoint(0), endpoint(0)) is False
    assert host.snapshot_id("endpoint:e0") == before


def test_bytes_pushed_for_one_traffic_change_do_not_grow_with_endpoint_count():
    sizes = {}
    for n in (10, 1000):
        host = host_with(n)
        held = {key: host.snapshot_id(key) for key in host.keys()}
        host.publish("endpoint:e3", endpoint(3, 0.9), endpoint(3, 0.9))
        sizes[n] = len(pickle.dumps(host.updates_for(held)))
    # Only the snapshot id's own width may differ.
    assert abs(sizes[1000] - sizes[10]) <= 8


def test_stale_id_from_an_earlier_controller_gets_fresh_data():
    old = LongPollHost()
    old.publish("routes", "old table", "old table")
    held = {"routes": old.snapshot_id("routes")}
    restarted = LongPollHost()
    restarted.publish("routes", "new table", "new table")
    assert restarted.updates_for(held) == {"routes": (restarted.snapshot_id("routes"), "new table")}


def test_empty_subscription_still_gets_the_route_table():
    host = LongPollHost()
    host.publish("routes", "table", "table")
    result = asyncio.run(host.listen({}, "p1", timeout_s=0.1))
    assert result["routes"][1] == "table"


def test_listen_blocks_until_a_change_arrives():
    async def scenario():
        host = host_with(1)
        held = {"endpoint:e0": host.snapshot_id("endpoint:e0")}
        waiter = asyncio.ensure_future(host.listen(held, "p1", timeout_s=5))
        await asyncio.sleep(0.05)
        assert not waiter.done()
        host.publish("endpoint:e0", None, None)
        return await asyncio.wait_for(waiter, 1)

    assert asyncio.run(scenario())["endpoint:e0"][1] is None


def test_listen_returns_empty_after_its_timeout():
    host = host_with(1)
    held = {"endpoint:e0": host.snapshot_id("endpoint:e0")}
    assert asyncio.run(host.listen(held, "p1", timeout_s=0.05)) == {}


def test_a_proxy_acknowledges_a_snapshot_by_listening_with_its_id():
    host = host_with(1)
    key = "endpoint:e0"
    asyncio.run(host.listen({key: 0}, "p1", timeout_s=0.01))
    assert not host.acked("p1", key)
    asyncio.run(host.listen({key: host.snapshot_id(key)}, "p1", timeout_s=0.01))
    assert host.acked("p1", key)
    assert not host.acked("p2", key)


def test_a_key_the_proxy_stopped_listening_to_is_no_longer_counted_as_subscribed():
    # A backend deleted while routed, then re-created: its goal must not wait for
    # an ack from a proxy that dropped the key in between.
    host = host_with(2)
    both = {key: host.snapshot_id(key) for key in ("endpoint:e0", "endpoint:e1")}
    host.record_ack("p1", both)
    assert host.subscribed("p1", "endpoint:e1")
    host.record_ack("p1", {"endpoint:e0": both["endpoint:e0"]})
    assert not host.subscribed("p1", "endpoint:e1")
    assert host.acked("p1", "endpoint:e0")


def routed_host() -> LongPollHost:
    host = host_with(1)
    table = RouteTable(entries=(RouteEntry(route="/e0", methods=("GET",), endpoint="e0"),))
    host.publish("routes", table, table)
    host.publish("replicas:b0", "replica set of b0", "b0")
    return host


def test_a_fresh_proxy_gets_its_whole_table_in_one_answer():
    # A restarted proxy serves after one round trip, not one per level.
    updates = routed_host().updates_for({"routes": -1})
    assert set(updates) == {"routes", "endpoint:e0", "replicas:b0"}


def test_implied_keys_the_listener_holds_are_not_sent_again():
    host = routed_host()
    held = {"routes": -1, "endpoint:e0": host.snapshot_id("endpoint:e0"), "replicas:b0": host.snapshot_id("replicas:b0")}
    assert set(host.updates_for(held)) == {"routes"}
