"""What the proxy subscribes to and serves as long-poll answers arrive."""

from __future__ import annotations

import random

from proxy.pool.calling import Batching
from proxy.routes.routing import Resolution, resolve
from proxy.routes.subscriptions import UNSEEN, Subscriptions
from proxy.settings import ProxySettings
from vocabulary.control.longpoll import ReplicaInfo, ReplicaSet, RouteEntry, RouteTable
from vocabulary.spec.backends import BatchingConfig
from vocabulary.spec.endpoints import EndpointConfig


def subs() -> Subscriptions:
    return Subscriptions(ProxySettings(), random.Random(0))


def routes(*entries: tuple[str, str]) -> RouteTable:
    return RouteTable(entries=tuple(RouteEntry(route=r, methods=("GET",), endpoint=e) for r, e in entries))


def endpoint(name: str, traffic: dict[str, float], shadow: dict[str, float] | None = None) -> EndpointConfig:
    return EndpointConfig(name=name, route=f"/{name}", traffic=traffic, shadow=shadow or {})


def replicas(backend: str, *ids: str) -> ReplicaSet:
    return ReplicaSet(
        backend=backend, max_concurrent_queries=4,
        replicas=tuple(ReplicaInfo(replica_id=i, actor_name=i) for i in ids),
    )


def test_a_fresh_proxy_subscribes_to_routes_only() -> None:
    assert subs().keys_to_snapshot_ids() == {"routes": UNSEEN}


def test_routes_lead_to_endpoint_keys_and_endpoints_to_backend_keys() -> None:
    s = subs()
    s.apply({"routes": (1, routes(("/e", "e")))})
    assert s.keys_to_snapshot_ids() == {"routes": 1, "endpoint:e": UNSEEN}
    s.apply({"endpoint:e": (2, endpoint("e", {"v1": 1.0}, {"v3": 0.5}))})
    assert s.keys_to_snapshot_ids() == {
        "routes": 1, "endpoint:e": 2, "replicas:v1": UNSEEN, "replicas:v3": UNSEEN,
    }


def test_an_endpoint_is_served_only_once_its_replicas_are_known() -> None:
    s = subs()
    s.apply({"routes": (1, routes(("/e", "e")))})
    snapshot = s.apply({"endpoint:e": (2, endpoint("e", {"v1": 1.0}))})
    assert resolve(snapshot.routes, "/e", "GET")[0] is Resolution.NOT_FOUND
    snapshot = s.apply({"replicas:v1": (3, replicas("v1", "r1"))})
    assert resolve(snapshot.routes, "/e", "GET")[0] is Resolution.MATCHED


def test_a_traffic_switch_waits_for_the_new_backends_replicas() -> None:
    s = subs()
    s.apply({"routes": (1, routes(("/e", "e"))), "endpoint:e": (2, endpoint("e", {"v1": 1.0}))})
    s.apply({"replicas:v1": (3, replicas("v1", "r1"))})
    snapshot = s.apply({"endpoint:e": (4, endpoint("e", {"v2": 1.0}))})
    assert snapshot.endpoints["e"].traffic.names == ("v1",)
    snapshot = s.apply({"replicas:v2": (5, replicas("v2", "r2"))})
    assert snapshot.endpoints["e"].traffic.names == ("v2",)
    assert "v1" not in s.pools and "replicas:v1" not in s.keys_to_snapshot_ids()


def test_a_removed_route_stops_being_served_and_subscribed() -> None:
    s = subs()
    s.apply({"routes": (1, routes(("/e", "e"))), "endpoint:e": (2, endpoint("e", {"v1": 1.0}))})
    s.apply({"replicas:v1": (3, replicas("v1", "r1"))})
    snapshot = s.apply({"routes": (4, routes())})
    assert resolve(snapshot.routes, "/e", "GET")[0] is Resolution.NOT_FOUND
    assert s.keys_to_snapshot_ids() == {"routes": 4}


def test_replica_updates_change_the_pool_in_place() -> None:
    s = subs()
    s.apply({"routes": (1, routes(("/e", "e"))), "endpoint:e": (2, endpoint("e", {"v1": 1.0}))})
    s.apply({"replicas:v1": (3, replicas("v1", "r1"))})
    pool = s.pools["v1"]
    s.apply({"replicas:v1": (4, replicas("v1", "r1", "r2"))})
    assert s.pools["v1"] is pool and pool.replica_ids() == ["r1", "r2"]


def test_snapshot_ids_from_a_restarted_controller_are_taken_as_they_come() -> None:
    s = subs()
    s.apply({"routes": (40, routes())})
    s.apply({"routes": (2, routes())})
    assert s.keys_to_snapshot_ids() == {"routes": 2}


def test_the_route_listing_names_each_route_and_endpoint() -> None:
    s = subs()
    s.apply({"routes": (1, routes(("/e", "e"))), "endpoint:e": (2, endpoint("e", {"v1": 1.0}))})
    snapshot = s.apply({"replicas:v1": (3, replicas("v1", "r1"))})
    assert snapshot.routes_json == b'{"/e": {"endpoint": "e", "methods": ["GET"]}}'


def test_batching_and_cold_start_settings_reach_the_pool_and_change_in_place() -> None:
    s = subs()
    s.apply({"routes": (1, routes(("/e", "e"))), "endpoint:e": (2, endpoint("e", {"v1": 1.0}))})
    tuned = replicas("v1", "r1").model_copy(
        update={"batching": BatchingConfig(max_batch_size=4, batch_wait_timeout_s=0.5), "cold_start_timeout_s": 9.0}
    )
    pool = s.apply({"replicas:v1": (3, tuned)}).pools["v1"]
    assert (pool.batching, pool.cold_start_s) == (Batching("v1", 4, 0.5), 9.0)
    assert s.apply({"replicas:v1": (4, replicas("v1", "r1"))}).pools["v1"] is pool
    assert (pool.batching, pool.cold_start_s) == (None, None)
