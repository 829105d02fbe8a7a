"""Routing policies and the JSON match through the real proxy, with real replicas.

The real controller starts the proxy and the replicas; each answer names the
replica that gave it, so the tests see where the proxy sent every request.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from controller.client import ControllerClient
from tests.support.stack import eventually, met, proxy_url, quick_backend, run, start_controller
from vocabulary.spec.backends import AutoscalingConfig
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.routing import RoutingConfig

pytestmark = pytest.mark.real


class Cluster:
    def __init__(self, namespace: str) -> None:
        self.client: ControllerClient = start_controller(namespace, proxies=True)
        self.url = proxy_url(namespace)

    def backend(self, name: str, replicas: int, routing: dict[str, Any] | None = None, handler: str = "WhoAmI") -> None:
        met(self.client, run(self.client.apply_backend(quick_backend(
            name, f"routing_handlers:{handler}", num_replicas=replicas,
            routing=None if routing is None else RoutingConfig.model_validate(routing),
        ))))

    def endpoint(self, name: str, traffic: dict[str, float], **fields: Any) -> None:
        met(self.client, run(self.client.apply_endpoint(
            EndpointConfig.model_validate({"name": name, "route": f"/{name}", "traffic": traffic, **fields})
        )))


@pytest.fixture(scope="module")
def cluster(ray_session: str) -> Iterator[Cluster]:
    built = Cluster(f"{ray_session}-routing-{uuid.uuid4().hex[:6]}")
    yield built
    built.client.shutdown()


def replicas_seen(client: httpx.Client, path: str, count: int, **request: Any) -> Counter[str]:
    return Counter(client.post(path, **request).json()["replica"] for _ in range(count))


def test_consistent_hash_keeps_a_key_on_one_replica_and_moves_few_keys_when_one_joins(cluster: Cluster) -> None:
    routing = {"policy": "consistent_hash", "key": "header:x-user"}
    cluster.backend("hashed", 4, routing)
    cluster.endpoint("hashed", {"hashed": 1.0})
    users = [f"user-{n}" for n in range(100)]
    with httpx.Client(base_url=cluster.url, timeout=20) as client:
        eventually(lambda: len(replicas_seen(client, "/hashed", 40)) == 4 or None, 30)
        before: dict[str, str] = {}
        for user in users:
            seen = replicas_seen(client, "/hashed", 3, headers={"x-user": user})
            assert len(seen) == 1, (user, seen)  # a key always reaches one replica
            before[user] = next(iter(seen))
        assert len(set(before.values())) == 4

        cluster.backend("hashed", 5, routing)

        def after_join() -> dict[str, str] | None:
            now = {user: client.post("/hashed", headers={"x-user": user}).json()["replica"] for user in users}
            return now if len(set(now.values())) == 5 else None

        after = eventually(after_join, 60)
    assert after is not None
    joined = (set(after.values()) - set(before.values())).pop()
    moved = [user for user in users if after[user] != before[user]]
    assert all(after[user] == joined for user in moved)  # keys move only to the replica that joined
    assert 5 <= len(moved) <= 40, len(moved)  # about 1/5 of them


def test_prefix_affinity_keeps_each_conversation_on_one_replica(cluster: Cluster) -> None:
    cluster.backend("chat", 4, {"policy": "prefix_affinity", "key": "json:messages", "prefix_bytes": 1024})
    cluster.endpoint("chat", {"chat": 1.0})
    with httpx.Client(base_url=cluster.url, timeout=20) as client:
        eventually(lambda: len(replicas_seen(client, "/chat", 40)) == 4 or None, 30)
        homes: dict[int, set[str]] = {n: set() for n in range(16)}
        history: dict[int, list[dict[str, str]]] = {n: [] for n in range(16)}
        for turn in range(6):
            for n in range(16):
                history[n].append({"role": "user", "content": f"conversation {n}, question {turn}: " + "words " * 8})
                answer = client.post("/chat", json={"model": "sim", "messages": history[n]})
                assert answer.status_code == 200
                homes[n].add(answer.json()["replica"])
                history[n].append({"role": "assistant", "content": f"answer {turn}"})
        assert all(len(home) == 1 for home in homes.values()), homes
        assert len({next(iter(home)) for home in homes.values()}) >= 3  # conversations spread
        # A body that is not JSON has no key: served by the default policy, never an error.
        assert client.post("/chat", content=b"not json").status_code == 200


def test_round_robin_takes_each_replica_in_turn(cluster: Cluster) -> None:
    cluster.backend("turns", 4, {"policy": "round_robin"})
    cluster.endpoint("turns", {"turns": 1.0})
    with httpx.Client(base_url=cluster.url, timeout=20) as client:
        eventually(lambda: len(replicas_seen(client, "/turns", 40)) == 4 or None, 30)
        counts = replicas_seen(client, "/turns", 40)
    assert sorted(counts.values()) == [10, 10, 10, 10], counts


def test_least_loaded_spreads_concurrent_slow_requests_one_per_replica(cluster: Cluster) -> None:
    cluster.backend("least", 4, {"policy": "least_loaded"})
    cluster.endpoint("least", {"least": 1.0})
    with httpx.Client(base_url=cluster.url, timeout=20) as client:
        eventually(lambda: len(replicas_seen(client, "/least", 40)) == 4 or None, 30)

    def one(_: int) -> str:
        return httpx.post(f"{cluster.url}/least", params={"sleep": "1.5"}, timeout=20).json()["replica"]

    for _ in range(3):
        with ThreadPoolExecutor(4) as pool:
            answered = list(pool.map(one, range(4)))
        assert len(set(answered)) == 4, answered


def test_a_json_match_sends_a_model_to_its_backend(cluster: Cluster) -> None:
    cluster.backend("model-large", 1)
    cluster.backend("model-small", 1)
    cluster.endpoint(
        "models", {"model-large": 1.0}, match=[{"json": "model", "value": "small", "backend": "model-small"}]
    )
    with httpx.Client(base_url=cluster.url, timeout=20) as client:
        small = client.post("/models", json={"model": "small"}).json()["replica"]
        large = client.post("/models", json={"model": "large"}).json()["replica"]
        assert small.startswith("model-small") and large.startswith("model-large"), (small, large)
        assert client.post("/models", content=b"{not json").json()["replica"].startswith("model-large")
        assert client.post("/models", content=json.dumps(["small"])).json()["replica"].startswith("model-large")


def test_a_tenant_over_its_limit_gets_429_while_another_is_untouched(cluster: Cluster) -> None:
    cluster.backend("limited", 1)
    cluster.endpoint(
        "limited", {"limited": 1.0}, limits={"requests_per_s": 0.2, "burst": 3, "key": "header:authorization"}
    )
    with httpx.Client(base_url=cluster.url, timeout=20) as client:
        ada = [client.get("/limited", headers={"authorization": "Bearer ada"}) for _ in range(6)]
        bob = [client.get("/limited", headers={"authorization": "Bearer bob"}) for _ in range(3)]
    assert [r.status_code for r in ada] == [200, 200, 200, 429, 429, 429]
    assert all(1 <= int(r.headers["retry-after"]) <= 5 for r in ada[3:])
    assert "Bearer ada" not in ada[3].text
    assert [r.status_code for r in bob] == [200, 200, 200]


def test_least_loaded_ranks_replicas_by_the_load_user_code_reports(cluster: Cluster) -> None:
    cluster.backend("reporting", 3, {"policy": "least_loaded"}, handler="CountsItsRequests")
    cluster.endpoint("reporting", {"reporting": 1.0})
    served: Counter[str] = Counter()  # every answer, so the totals are what each replica reported last
    with httpx.Client(base_url=cluster.url, timeout=20) as client:

        def warm() -> bool | None:
            for _ in range(10):
                served[client.post("/reporting").json()["replica"]] += 1
            return len(served) == 3 or None

        # Until each replica has answered once (and so reported), the proxy ranks by requests in flight.
        eventually(warm, 30)
        answers = [client.post("/reporting") for _ in range(60)]
    assert all(":load" not in answer.headers for answer in answers)
    served.update(answer.json()["replica"] for answer in answers)
    # Each reports the requests it served: the proxy evens the totals out exactly, as
    # in-flight counts (always 0 between sequential requests) never could.
    assert max(served.values()) - min(served.values()) <= 1, served


def test_the_autoscaler_scales_on_the_load_replicas_report(cluster: Cluster) -> None:
    met(cluster.client, run(cluster.client.apply_backend(quick_backend(
        "kv", "routing_handlers:ReportsLoad", num_replicas=1, init_args=(0.9,),
        autoscaling=AutoscalingConfig(
            min_replicas=1, max_replicas=3, target_reported_load=0.4, upscale_delay_s=0.5, downscale_delay_s=60,
        ),
    ))))
    cluster.endpoint("kv", {"kv": 1.0})

    def scaled() -> int | None:
        httpx.post(f"{cluster.url}/kv", timeout=20)  # one request at a time: requests alone want 1 replica
        target = run(cluster.client.get_status()).backends["kv"].target_replicas
        return target if target == 3 else None

    # 0.9 reported by one replica wants ceil(0.9 / 0.4) = 3; more replicas each report 0.9 too, capped at 3.
    assert eventually(scaled, 60) == 3


def test_prefix_affinity_keeps_the_simulated_llm_s_prefixes_cached(cluster: Cluster, tmp_path: Path) -> None:
    # The shipped simulator, as a user's repository would hold it.
    shutil.copy(Path(__file__).parents[2] / "deployments" / "apps" / "llm_sim.py", tmp_path / "llm_sim.py")
    met(cluster.client, run(cluster.client.apply_backend(quick_backend(
        "sim", "llm_sim:LLMSim", num_replicas=4, working_dir=str(tmp_path),
        user_config={"prefill_s_per_token": 0.0001, "decode_s_per_token": 0.001, "max_tokens": 4},
        routing=RoutingConfig.model_validate({"policy": "prefix_affinity", "key": "json:messages"}),
    ))))
    cluster.endpoint("v1", {"sim": 1.0})
    with httpx.Client(base_url=cluster.url, timeout=20) as client:
        cached: dict[int, list[int]] = {n: [] for n in range(8)}
        history: dict[int, list[dict[str, str]]] = {
            n: [{"role": "system", "content": f"conversation {n}: " + "context " * 30}] for n in range(8)
        }
        for turn in range(4):
            for n in range(8):
                history[n].append({"role": "user", "content": f"question {turn} " + "word " * 20})
                stream = turn % 2 == 1
                answer = client.post("/v1/chat/completions", json={"model": "sim", "messages": history[n], "stream": stream})
                assert answer.status_code == 200
                if stream:
                    events = [e[len("data: "):] for e in answer.text.split("\n\n") if e]
                    assert events[-1] == "[DONE]"
                    usage = json.loads(events[-2])["usage"]
                else:
                    usage = answer.json()["usage"]
                cached[n].append(usage["prompt_tokens_details"]["cached_tokens"])
                history[n].append({"role": "assistant", "content": "tok0 tok1 tok2 tok3"})
    # Every turn after a conversation's first finds its earlier turns in its replica's cache.
    assert all(turns[0] == 0 and all(c > 0 for c in turns[1:]) for turns in cached.values()), cached


def test_a_handle_call_follows_the_callee_backends_routing_policy(cluster: Cluster) -> None:
    cluster.backend("hashed-callee", 4, {"policy": "consistent_hash", "key": "json:user"}, handler="CalledWhoAmI")
    cluster.backend("chat-callee", 4, {"policy": "prefix_affinity", "key": "json:messages"}, handler="CalledWhoAmI")
    cluster.backend("relay", 1, handler="Relay")
    cluster.endpoint("relay", {"relay": 1.0})
    with httpx.Client(base_url=cluster.url, timeout=20) as client:

        def callee_replica(to: str, body: dict[str, Any]) -> str:
            answer = client.post(f"/relay?to={to}", json=body)
            assert answer.status_code == 200, answer.text
            return str(answer.json()["replica"])

        # Until the relay's handles know all four replicas of each callee.
        eventually(lambda: len({callee_replica("hashed-callee", {"user": f"warm-{n}"}) for n in range(40)}) == 4
                   or None, 60)
        eventually(lambda: len({callee_replica("chat-callee", {"messages": [{"content": f"warm {n}"}]})
                                for n in range(40)}) == 4 or None, 60)
        homes = {}
        for n in range(24):
            seen = {callee_replica("hashed-callee", {"user": f"user-{n}"}) for _ in range(4)}
            assert len(seen) == 1, (n, seen)  # a key always reaches one replica, through a handle too
            homes[n] = seen.pop()
        assert len(set(homes.values())) >= 3  # and keys spread

        conversations: dict[int, set[str]] = {n: set() for n in range(12)}
        for turn in range(5):
            for n in range(12):
                messages = [{"role": "system", "content": f"conversation {n} " + "words " * 60}]
                messages += [{"role": "user", "content": f"question {t}"} for t in range(turn + 1)]
                conversations[n].add(callee_replica("chat-callee", {"model": "sim", "messages": messages}))
        assert all(len(home) == 1 for home in conversations.values()), conversations
        assert len({next(iter(home)) for home in conversations.values()}) >= 3
