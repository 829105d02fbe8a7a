"""Routing policies: a key stays on one replica, ~1/N of keys move, prefixes stay together unless overloaded."""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from typing import Any

import pytest

from gitops.specs.models import check_backend, check_endpoint
from proxy.pool.replicas import ReplicaPool
from proxy.routes.steering import Steering
from vocabulary.request_path.policies import ConsistentHash, LeastLoaded, PrefixAffinity, RoundRobin, policy_for
from vocabulary.request_path.request_keys import KeyReader, json_bytes
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.keys import KeyKind
from vocabulary.spec.routing import RoutingConfig, RoutingPolicy

IDS = [f"backend#r{n}" for n in range(8)]
KEYS = [f"user-{n}".encode() for n in range(4000)]


def hashing(ids: list[str]) -> ConsistentHash:
    policy = ConsistentHash()
    policy.members(ids)
    return policy


def test_a_key_always_reaches_one_replica_and_keys_spread_evenly() -> None:
    policy, rng = hashing(IDS), random.Random(1)
    idle = [0] * len(IDS)
    first = {key: policy.choose(idle, 10, key, rng) for key in KEYS}
    for _ in range(3):
        busy = [rng.randrange(5) for _ in IDS]  # load below the cap changes nothing
        assert all(policy.choose(busy, 10, key, rng) == first[key] for key in KEYS)
    counts = Counter(first.values())
    assert len(counts) == len(IDS)
    expected = len(KEYS) / len(IDS)
    chi2 = sum((count - expected) ** 2 / expected for count in counts.values())
    assert chi2 < 24.32  # chi-square, 7 degrees of freedom, p = 0.001


@pytest.mark.parametrize("change", ["join", "leave"])
def test_about_one_nth_of_keys_move_when_a_replica_joins_or_leaves(change: str) -> None:
    before_ids = IDS[:7] if change == "join" else IDS
    after_ids = IDS if change == "join" else IDS[:7]
    before, after, rng = hashing(before_ids), hashing(after_ids), random.Random(2)
    moved = 0
    for key in KEYS:
        was = before_ids[before.choose([0] * len(before_ids), 10, key, rng) or 0]
        now = after_ids[after.choose([0] * len(after_ids), 10, key, rng) or 0]
        if was != now:
            moved += 1
            # Only keys that the new replica wins, or that the gone one held, move.
            assert (now == IDS[7]) if change == "join" else (was == IDS[7])
    assert 0.6 / 8 < moved / len(KEYS) < 1.6 / 8


def test_a_full_replica_passes_its_keys_to_their_second_choice() -> None:
    policy, rng = hashing(IDS[:3]), random.Random(3)
    home = policy.choose([0, 0, 0], 1, b"k", rng)
    assert home is not None
    full = [1 if index == home else 0 for index in range(3)]
    second = policy.choose(full, 1, b"k", rng)
    assert second not in (None, home)
    assert all(policy.choose(full, 1, b"k", rng) == second for _ in range(20))
    assert policy.choose([1, 1, 1], 1, b"k", rng) is None


def test_round_robin_takes_each_replica_in_turn_and_skips_full_ones() -> None:
    policy, rng = RoundRobin(), random.Random(0)
    assert [policy.choose([0, 0, 0], 5, None, rng) for _ in range(6)] == [0, 1, 2, 0, 1, 2]
    assert [policy.choose([0, 5, 0], 5, None, rng) for _ in range(4)] == [0, 2, 0, 2]
    assert policy.choose([5, 5, 5], 5, None, rng) is None


def test_least_loaded_takes_the_fewest_in_flight() -> None:
    policy, rng = LeastLoaded(), random.Random(0)
    assert all(policy.choose([3, 1, 2, 4], 5, None, rng) == 1 for _ in range(20))
    assert Counter(policy.choose([1, 0, 0, 1], 5, None, rng) for _ in range(400)).keys() == {1, 2}
    assert policy.choose([5, 5], 5, None, rng) is None


def prefix(ids: list[str], max_imbalance: float = 2.0, prefix_bytes: int = 1024, entries: int = 16384) -> PrefixAffinity:
    policy = PrefixAffinity(prefix_bytes, max_imbalance, entries)
    policy.members(ids)
    return policy


def conversation(n: int, turns: int) -> bytes:
    messages: list[dict[str, str]] = [{"role": "system", "content": f"conversation {n}: be brief."}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"question {turn} of conversation {n}, with some words"})
        messages.append({"role": "assistant", "content": f"answer {turn}"})
    return json.dumps(messages, separators=(",", ":")).encode()


def test_every_turn_of_a_conversation_reaches_the_replica_of_its_first_turn() -> None:
    policy, rng = prefix(IDS[:4]), random.Random(4)
    homes: dict[int, set[int | None]] = {n: set() for n in range(16)}
    for turn in range(1, 20):
        for n in range(16):
            homes[n].add(policy.choose([1, 1, 1, 1], 100, conversation(n, turn), rng))
    assert all(len(home) == 1 for home in homes.values())
    # Conversations that share no prefix spread over the replicas.
    assert len({next(iter(home)) for home in homes.values()}) >= 3


def test_a_new_prefix_starts_where_every_worker_would_start_it() -> None:
    # Two proxy workers, each with its own table, agree on a conversation they never saw.
    first, second, rng = prefix(IDS[:4]), prefix(IDS[:4]), random.Random(5)
    for n in range(50):
        key = conversation(n, 1)
        assert first.choose([0] * 4, 100, key, rng) == second.choose([0] * 4, 100, key, rng)


def test_an_overloaded_preferred_replica_gives_way_to_the_least_loaded() -> None:
    policy, rng = prefix(IDS[:4], max_imbalance=2.0), random.Random(6)
    key = conversation(1, 3)
    home = policy.choose([0, 0, 0, 0], 100, key, rng)
    assert home is not None
    loads = [1, 1, 1, 1]
    loads[home] = 2  # 2 <= 2 x 1: still preferred
    assert policy.choose(loads, 100, key, rng) == home
    loads[home] = 3  # 3 > 2 x 1: the least loaded takes it
    other = policy.choose(loads, 100, key, rng)
    assert other not in (None, home) and loads[other] == 1
    # ...and the conversation's later turns follow it there.
    assert policy.choose([1, 1, 1, 1], 100, conversation(1, 4), rng) == other


def test_a_prefix_of_a_replica_that_left_goes_elsewhere() -> None:
    policy, rng = prefix(IDS[:4]), random.Random(7)
    key = conversation(2, 2)
    home = policy.choose([0] * 4, 100, key, rng)
    assert home is not None
    remaining = [replica for index, replica in enumerate(IDS[:4]) if index != home]
    policy.members(remaining)
    assert policy.choose([0] * 3, 100, key, rng) in (0, 1, 2)


def test_only_the_first_prefix_bytes_count() -> None:
    policy, rng = prefix(IDS[:4], prefix_bytes=64), random.Random(8)
    shared = b"x" * 64
    homes = {policy.choose([0] * 4, 100, shared + f"tail {n}".encode(), rng) for n in range(50)}
    assert len(homes) == 1


def test_the_prefix_table_is_bounded() -> None:
    policy, rng = prefix(IDS[:4], entries=100), random.Random(9)
    for n in range(500):
        policy.choose([0] * 4, 100, conversation(n, 5), rng)
    assert policy.table_size() <= 100


def test_a_request_without_a_key_is_routed_by_power_of_two() -> None:
    for policy in (hashing(IDS[:4]), prefix(IDS[:4])):
        rng = random.Random(10)
        assert Counter(policy.choose([0, 0, 0, 0], 100, None, rng) for _ in range(400)).keys() == {0, 1, 2, 3}


def test_the_policy_of_a_config() -> None:
    assert policy_for(None) is None
    assert policy_for(RoutingConfig()) is None  # power_of_two: the pool calls pick_replica itself
    assert isinstance(policy_for(RoutingConfig(policy=RoutingPolicy.ROUND_ROBIN)), RoundRobin)
    assert isinstance(policy_for(RoutingConfig(policy=RoutingPolicy.LEAST_LOADED)), LeastLoaded)
    assert isinstance(policy_for(RoutingConfig(policy=RoutingPolicy.CONSISTENT_HASH, key="header:x-user")), ConsistentHash)
    assert isinstance(policy_for(RoutingConfig(policy=RoutingPolicy.PREFIX_AFFINITY, key="json:messages")), PrefixAffinity)


# --- keys -----------------------------------------------------------------------


def request(query: bytes = b"", headers: list[tuple[bytes, bytes]] | None = None, body: bytes = b"") -> Any:
    return ("POST", "/v1", query, headers or [], body)


@pytest.mark.parametrize(
    ("key", "req", "expected"),
    [
        ("header:X-User", request(headers=[(b"x-user", b"ada")]), b"ada"),
        ("header:x-user", request(headers=[(b"x-other", b"ada")]), None),
        ("cookie:session", request(headers=[(b"cookie", b"a=1; session=s1")]), b"s1"),
        ("query:user", request(query=b"x=1&user=b%C3%A9"), "bé".encode()),
        ("query:user", request(query=b"x=1"), None),
        ("json:messages", request(body=b'{"messages": [{"role": "user", "content": "hi"}]}'),
         b'[{"role":"user","content":"hi"}]'),
        ("json:user", request(body=b'{"user": "ada"}'), b"ada"),
        ("json:user", request(body=b"not json"), None),
        ("json:user", request(body=b'["a", "list"]'), None),
        ("json:user", request(body=b'{"other": 1}'), None),
        ("json:user", request(body=b""), None),
    ],
)
def test_a_key_is_read_where_the_spec_says(key: str, req: Any, expected: bytes | None) -> None:
    config = RoutingConfig(policy=RoutingPolicy.CONSISTENT_HASH, key=key)
    reader = KeyReader.from_config(config)
    assert reader is not None and reader.read(req) == expected


def test_a_pool_routes_a_keyed_request_by_its_key_even_after_waiting() -> None:
    async def scenario() -> None:
        pool = ReplicaPool("b", random.Random(0), max_queued=4)
        routing = RoutingConfig(policy=RoutingPolicy.CONSISTENT_HASH, key="header:x-user")
        first = [(f"r{n}", f"h{n}") for n in range(4)]
        pool.update(1, first, routing=routing)
        key = pool.request_key(request(headers=[(b"x-user", b"ada")]))
        assert key == b"ada"
        expected = hashing([replica for replica, _ in first]).choose([0] * 4, 1, key, random.Random(0))
        home = pool.free_slot(key)
        assert home is not None and home.replica_id == f"r{expected}"
        for other in range(3):
            assert pool.free_slot(f"other-{other}".encode()) is not None
        assert pool.free_slot(key) is None  # all four are full
        waiting = asyncio.ensure_future(pool.acquire(key))
        await asyncio.sleep(0)
        assert not waiting.done()
        # Four replicas join at once: the waiter takes its key's favourite of them.
        both = first + [(f"r{n}", f"h{n}") for n in range(4, 8)]
        pool.update(1, both, routing=routing)
        loads = [1] * 4 + [0] * 4
        favourite = hashing([replica for replica, _ in both]).choose(loads, 1, key, random.Random(0))
        assert (await waiting).replica_id == f"r{favourite}"

    asyncio.run(scenario())


# --- the spec -------------------------------------------------------------------


def backend_messages(routing: dict[str, Any]) -> list[str]:
    return [p.message for p in check_backend({"import_path": "m:Model", "routing": routing}, ("backends", "b"))[1]]


def test_routing_keys_are_checked_with_their_place() -> None:
    assert backend_messages({"policy": "prefix_affinity", "key": "json:messages", "prefix_bytes": 512}) == []
    assert backend_messages({"policy": "consistent_hash"}) == [
        (
            "backends.b.routing: policy 'consistent_hash' needs a key "
            "('header:NAME', 'cookie:NAME', 'query:NAME' or 'json:FIELD')"
        )
    ]
    assert backend_messages({"policy": "round_robin", "key": "header:x"}) == [
        "backends.b.routing: policy 'round_robin' reads no key (only consistent_hash and prefix_affinity do)"
    ]
    assert backend_messages({"policy": "random"})[0].startswith("backends.b.routing.policy:")
    assert backend_messages({"policy": "consistent_hash", "key": "body:x"}) == [
        "backends.b.routing.key: must be 'header:NAME', 'cookie:NAME', 'query:NAME' or 'json:FIELD' (got 'body:x')"
    ]
    assert backend_messages({"policy": "prefix_affinity", "key": "json:m", "max_imbalance": 0.5})[0].startswith(
        "backends.b.routing.max_imbalance:"
    )


def test_a_header_key_is_case_insensitive() -> None:
    config = RoutingConfig(policy=RoutingPolicy.CONSISTENT_HASH, key="header:X-User")
    assert config.key_source() == (KeyKind.HEADER, "x-user")


# --- JSON match ------------------------------------------------------------------


def steering(match: list[dict[str, str]]) -> Steering:
    config = {"name": "e", "route": "/e", "traffic": {"v1": 1.0}, "match": match}
    return Steering.from_config(EndpointConfig.model_validate(config))


def test_a_json_rule_picks_its_backend_from_the_body() -> None:
    rule = steering([{"json": "model", "value": "small", "backend": "v2"}, {"header": "x-t", "value": "1", "backend": "v3"}])
    assert rule.reads_body
    assert rule.matched([], b'{"model": "small"}') == "v2"
    assert rule.matched([], b'{"model": "large"}') is None
    assert rule.matched([(b"x-t", b"1")], b'{"model": "small"}') == "v2"  # in order
    assert rule.matched([(b"x-t", b"1")], b"not json") == "v3"
    assert rule.matched([(b"x-t", b"1")], None) is None  # the body is not read yet: decided later
    assert steering([{"json": "n", "value": "3", "backend": "v2"}]).matched([], b'{"n": 3}') == "v2"


def test_a_match_rule_reads_a_header_or_a_json_field_never_both() -> None:
    def messages(rule: dict[str, str]) -> list[str]:
        endpoint = {"route": "/e", "traffic": {"b": 1.0}, "match": [rule]}
        return [p.message for p in check_endpoint(endpoint, ("endpoints", "e"))[1]]

    assert messages({"json": "model", "value": "small", "backend": "b"}) == []
    assert messages({"value": "small", "backend": "b"}) == ["endpoints.e.match[0]: needs exactly one of header and json"]
    assert messages({"json": "m", "header": "x", "value": "s", "backend": "b"}) == [
        "endpoints.e.match[0]: needs exactly one of header and json"
    ]


@pytest.mark.parametrize("items", [0, 1, 3, 5, 40, 300])
def test_a_long_json_array_is_serialised_as_far_as_its_prefix(items: int) -> None:
    value = [{"role": "user", "content": f"message {n} é"} for n in range(items)]
    whole = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    head = json_bytes(value, 256)
    assert head is not None and whole.startswith(head) and len(head) >= min(len(whole), 256)


def test_least_loaded_ranks_by_reported_load_once_every_replica_has_one() -> None:
    policy, rng = LeastLoaded(), random.Random(11)
    assert all(policy.choose([0, 0, 0], 5, None, rng, [0.9, 0.2, 0.5]) == 1 for _ in range(20))
    assert all(policy.choose([0, 5, 0], 5, None, rng, [0.9, 0.2, 0.5]) == 2 for _ in range(20))  # full: skipped
    assert policy.choose([5, 5, 5], 5, None, rng, [0.9, 0.2, 0.5]) is None


def test_prefix_affinity_leaves_by_requests_in_flight_for_the_lowest_reported_load() -> None:
    policy, rng = prefix(IDS[:3], max_imbalance=2.0), random.Random(12)
    key = conversation(3, 2)
    home = policy.choose([0, 0, 0], 100, key, rng)
    assert home is not None
    others = [index for index in range(3) if index != home]
    loads = [0.5, 0.5, 0.5]
    loads[home], loads[others[0]], loads[others[1]] = 0.9, 0.4, 0.1
    in_flight = [1, 1, 1]
    assert policy.choose(in_flight, 100, key, rng, loads) == home  # a high report alone moves nothing
    in_flight[home] = 3  # 3 > 2 x 1: leave, for the replica reporting the least
    assert policy.choose(in_flight, 100, key, rng, loads) == others[1]
