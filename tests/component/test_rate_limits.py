"""Per-tenant limits: token bucket arithmetic, tenants kept apart, one node's workers sharing buckets."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from gitops.specs.models import check_endpoint
from proxy.observability.metrics import ProxyMetrics
from proxy.routes.rate_limits import LocalBuckets, TenantLimit, node_share, take_token
from proxy.shell.shared_buckets import SharedBuckets
from tests.support.proxy_app import FakeReplica, Proxy, replica_set, run
from vocabulary.control.longpoll import RouteEntry, RouteTable
from vocabulary.spec.endpoints import EndpointConfig, LimitsConfig


def test_a_bucket_grants_its_burst_then_one_token_per_interval() -> None:
    buckets = LocalBuckets()
    granted = [buckets.take(7, rate=2.0, burst=3, now=100.0) for _ in range(4)]
    assert granted[:3] == [0.0, 0.0, 0.0]
    assert granted[3] == pytest.approx(0.5)  # one token every 1/2 s
    assert buckets.take(7, 2.0, 3, now=100.25) == pytest.approx(0.25)
    assert buckets.take(7, 2.0, 3, now=100.5) == 0.0
    # An idle bucket refills to its burst, never beyond.
    assert [buckets.take(7, 2.0, 3, now=200.0) for _ in range(4)][3] > 0


def test_take_token_never_goes_back_in_time() -> None:
    assert take_token(0.0, 10.0, 9.0, rate=1.0, burst=1) == (0.0, 1.0)


def test_tenants_have_buckets_of_their_own_and_their_keys_are_hashed() -> None:
    limit = TenantLimit.from_config("chat", LimitsConfig(requests_per_s=1, burst=1, key="header:Authorization"))
    assert limit is not None
    ada = limit.slot(b"", [(b"authorization", b"Bearer ada")])
    bob = limit.slot(b"", [(b"authorization", b"Bearer bob")])
    nobody = limit.slot(b"", [])
    assert len({ada, bob, nobody}) == 3
    assert ada == limit.slot(b"", [(b"authorization", b"Bearer ada")])
    assert b"ada" not in repr(limit).encode() and "ada" not in str(ada)
    other = TenantLimit.from_config("other", LimitsConfig(requests_per_s=1, key="header:authorization"))
    assert other is not None and other.slot(b"", [(b"authorization", b"Bearer ada")]) != ada
    buckets = LocalBuckets()
    assert buckets.take(ada, 1, 1, 0.0) == 0.0 and buckets.take(ada, 1, 1, 0.0) > 0
    assert buckets.take(bob, 1, 1, 0.0) == 0.0  # untouched by ada's use


def test_the_local_table_is_bounded() -> None:
    buckets = LocalBuckets(capacity=10)
    for slot in range(100):
        buckets.take(slot + 1, 1, 1, 0.0)
    assert len(buckets._buckets) == 10


def test_two_workers_share_one_nodes_buckets(tmp_path: Path) -> None:
    first, second = SharedBuckets(str(tmp_path)), SharedBuckets(str(tmp_path))
    try:
        assert first.take(42, rate=1.0, burst=2, now=10.0) == 0.0
        assert second.take(42, rate=1.0, burst=2, now=10.0) == 0.0
        assert first.take(42, rate=1.0, burst=2, now=10.0) == pytest.approx(1.0)  # the burst is spent, by both
        assert second.take(43, rate=1.0, burst=2, now=10.0) == 0.0  # another tenant
    finally:
        first.close()
        second.close()


def _take_many(directory: str, count: int, out: multiprocessing.Queue[int]) -> None:
    buckets = SharedBuckets(directory)
    out.put(sum(1 for _ in range(count) if buckets.take(99, rate=0.001, burst=100, now=50.0) == 0.0))


def test_worker_processes_never_spend_the_same_token(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    results: multiprocessing.Queue[int] = context.Queue()
    workers = [context.Process(target=_take_many, args=(str(tmp_path), 80, results)) for _ in range(3)]
    for worker in workers:
        worker.start()
    granted = sum(results.get(timeout=60) for _ in workers)
    for worker in workers:
        worker.join(timeout=30)
    assert granted == 100  # 240 asked, the burst of 100 granted once across the processes


def test_a_full_probe_window_takes_over_the_longest_idle_bucket(tmp_path: Path) -> None:
    buckets = SharedBuckets(str(tmp_path), slots=8)
    try:
        for slot in range(1, 9):
            buckets.take(slot * 8, rate=1.0, burst=1, now=float(slot))  # all land in slot 0's window
        assert buckets.take(9 * 8, rate=1.0, burst=1, now=20.0) == 0.0  # a newcomer gets a full bucket
    finally:
        buckets.close()


def test_refusals_are_counted_by_endpoint_only() -> None:
    metrics = ProxyMetrics()
    metrics.rate_limited("chat")
    metrics.rate_limited("chat")
    assert 'gitops_http_rate_limited_total{endpoint="chat"} 2.0' in metrics.render().decode()


def test_limits_are_checked_with_their_place() -> None:
    def messages(limits: dict[str, object]) -> list[str]:
        endpoint = {"route": "/e", "traffic": {"b": 1.0}, "limits": limits}
        return [p.message for p in check_endpoint(endpoint, ("endpoints", "e"))[1]]

    assert messages({"requests_per_s": 10, "burst": 20, "key": "header:authorization"}) == []
    assert messages({"burst": 2}) == ["endpoints.e.limits: needs requests_per_s, tokens_per_minute or both"]
    assert messages({"tokens_per_minute": 1000, "key": "header:authorization"}) == []
    assert messages({"tokens_per_minute": 0})[0].startswith("endpoints.e.limits.tokens_per_minute: must be >= 1")
    assert messages({"tokens_per_minute": 1.5})[0].startswith("endpoints.e.limits.tokens_per_minute: must be an integer")
    assert messages({"requests_per_s": 1, "key": "json:user"}) == [
        "endpoints.e.limits.key: must be 'header:NAME', 'cookie:NAME' or 'query:NAME' (got 'json:user')"
    ]
    assert messages({"requests_per_s": 0})[0].startswith("endpoints.e.limits.requests_per_s:")


def test_each_node_enforces_its_share_of_a_limit() -> None:
    config = LimitsConfig(requests_per_s=10, burst=5, key="header:x-tenant")
    assert node_share(config, 1) == (10, 5)
    assert node_share(config, 2) == (5, 3)  # the burst rounded up: a tenant on both nodes gets at most 6
    assert node_share(config, 4) == (2.5, 2)
    assert node_share(config, 100) == (0.1, 1)  # a bucket holds at least one token
    assert node_share(config, 0) == (10, 5)
    limit = TenantLimit.from_config("chat", config, nodes=2)
    assert limit is not None and (limit.rate, limit.burst) == (5, 3)


def test_the_proxy_enforces_the_share_the_route_table_names() -> None:
    """Through the proxy app: the controller's route table says how many nodes share the limit."""
    proxy = Proxy()
    config = EndpointConfig(name="chat", route="/chat", traffic={"b": 1.0},
                            limits=LimitsConfig(requests_per_s=0.001, burst=4, key="header:x-tenant"))

    def publish(nodes: int) -> None:
        table = RouteTable(entries=(RouteEntry(route="/chat", methods=("GET", "POST"), endpoint="chat"),), nodes=nodes)
        proxy.publish(routes=table, endpoint__chat=config)

    async def statuses(tenant: str) -> list[int]:
        async with proxy.client() as client:
            return [(await client.get("/chat", headers={"x-tenant": tenant})).status_code for _ in range(5)]

    publish(nodes=1)
    proxy.publish(replicas__b=replica_set("b", [FakeReplica("r1")]))
    alone = run(statuses("ada"))
    publish(nodes=2)
    shared = run(statuses("bob"))
    assert alone == [200, 200, 200, 200, 429]
    assert shared == [200, 200, 429, 429, 429]  # half the burst on this node
