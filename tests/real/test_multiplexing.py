"""Many models per replica through the real proxy, with real replicas and the real controller.

Each answer names the replica that gave it and lists every model it loaded and
unloaded so far (`apps/multiplex_handlers.py`), so the tests see where the
proxy sent each model's requests and what each replica kept loaded. A composition
call (one backend calling the multiplexed one through a handle, which no proxy
checks) with a hostile model id is refused by the callee's loader.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator

import httpx
import pytest

from controller.client import ControllerClient
from tests.support.stack import eventually, met, proxy_url, quick_backend, run, start_controller
from vocabulary.spec.backends import AutoscalingConfig
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.routing import MultiplexConfig

pytestmark = pytest.mark.real


class Cluster:
    def __init__(self, namespace: str) -> None:
        self.client: ControllerClient = start_controller(namespace, proxies=True)
        self.url = proxy_url(namespace)

    def serve(self, name: str, replicas: int, multiplex: MultiplexConfig) -> None:
        met(self.client, run(self.client.apply_backend(quick_backend(
            name, "multiplex_handlers:ManyModels", num_replicas=replicas, multiplex=multiplex,
            version=f"v1+x{multiplex.max_models_per_replica}",
        ))))
        met(self.client, run(self.client.apply_endpoint(
            EndpointConfig(name=name, route=f"/{name}", traffic={name: 1.0})
        )))


@pytest.fixture(scope="module")
def cluster(ray_session: str) -> Iterator[Cluster]:
    built = Cluster(f"{ray_session}-multiplex-{uuid.uuid4().hex[:6]}")
    yield built
    built.client.shutdown()


def _ask(client: httpx.Client, path: str, model: str, header: str = "x-model-id") -> dict[str, Any]:
    answer = client.get(path, headers={header: model})
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_a_model_stays_on_the_replica_that_loaded_it(cluster: Cluster) -> None:
    cluster.serve("many", 2, MultiplexConfig(max_models_per_replica=2))
    models = ["m0", "m1", "m2", "m3"]  # 4 models fit in 2 replicas x 2
    homes: dict[str, set[str]] = defaultdict(set)
    with httpx.Client(base_url=cluster.url, timeout=20) as client:
        eventually(lambda: client.get("/many").status_code == 200 or None, 30)
        last: dict[str, dict[str, Any]] = {}
        for _ in range(6):
            for model in models:
                answer = _ask(client, "/many", model)
                assert answer["model"] == model
                homes[model].add(answer["replica"])
                last[answer["replica"]] = answer
    assert all(len(home) == 1 for home in homes.values()), homes
    assert len({next(iter(home)) for home in homes.values()}) == 2  # the models spread over both
    loads = [load for answer in last.values() for load in answer["loads"]]
    assert sorted(loads) == models, last  # each model loaded once, on one replica, never again
    assert all(answer["unloads"] == [] for answer in last.values())


def test_a_hot_model_spreads_to_another_replica_only_under_load(cluster: Cluster) -> None:
    cluster.serve("hot", 2, MultiplexConfig(max_models_per_replica=2))

    def ask(model: str, sleep_s: float = 0.0) -> dict[str, Any]:
        with httpx.Client(base_url=cluster.url, timeout=20) as client:
            answer = client.get("/hot", headers={"x-model-id": model}, params={"sleep": sleep_s})
            assert answer.status_code == 200, answer.text
            body: dict[str, Any] = answer.json()
            return body

    eventually(lambda: httpx.get(f"{cluster.url}/hot", timeout=20).status_code == 200 or None, 30)
    home = ask("hot")["replica"]
    assert {ask("hot")["replica"] for _ in range(10)} == {home}  # one at a time: it stays
    with ThreadPoolExecutor(8) as pool:
        burst = list(pool.map(lambda _: ask("hot", 0.3), range(16)))
    # Eight at once overload its replica (more than twice the idle one's): the other loads it too.
    assert len({answer["replica"] for answer in burst}) == 2
    # Each replica loaded it once, and then both keep serving it without loading again.
    after = [ask("hot") for _ in range(10)]
    loads = {answer["replica"]: answer["loads"] for answer in burst + after}
    assert all(loaded == ["hot"] for loaded in loads.values()), loads


def test_at_most_n_models_stay_loaded_least_recently_used_out_first(cluster: Cluster) -> None:
    cluster.serve("lru", 1, MultiplexConfig(max_models_per_replica=2, header="X-Adapter"))
    with httpx.Client(base_url=cluster.url, timeout=20) as client:
        eventually(lambda: client.get("/lru").status_code == 200 or None, 30)
        for model in ["a", "b", "a", "c"]:
            answer = _ask(client, "/lru", model, "x-adapter")
        # b was the least recently used when c came; then b again pushes out a.
        assert answer["loads"] == ["a", "b", "c"] and answer["unloads"] == ["b"]
        answer = _ask(client, "/lru", "b", "x-adapter")
        assert answer["loads"] == ["a", "b", "c", "b"] and answer["unloads"] == ["b", "a"]
        # The default header is not this backend's: no model named.
        assert _ask(client, "/lru", "a")["model"] is None


def test_a_handle_call_with_a_model_id_the_backend_does_not_accept_is_refused_by_its_loader(
    cluster: Cluster,
) -> None:
    cluster.serve("callee", 1, MultiplexConfig(max_models_per_replica=2))
    met(cluster.client, run(cluster.client.apply_backend(quick_backend("composer", "multiplex_handlers:Composer"))))
    met(cluster.client, run(cluster.client.apply_endpoint(
        EndpointConfig(name="composer", route="/composer", traffic={"composer": 1.0})
    )))
    with httpx.Client(base_url=cluster.url, timeout=20) as client:
        def ask(model: str) -> dict[str, Any]:
            answer = client.get("/composer", params={"target": "callee", "model": model})
            assert answer.status_code == 200, answer.text
            body: dict[str, Any] = answer.json()
            return body

        eventually(lambda: client.get("/composer", params={"target": "callee", "model": "m0"}).status_code == 200
                   or None, 30)
        assert ask("m0")["answer"] == {"model": "m0", "loads": ["m0"]}
        refused = ask("../../etc/passwd")
        assert "error" in refused, refused
        assert "ModelRefused" in refused["error"] and "'../../etc/passwd' refused" in refused["error"], refused
        assert "model_pattern" in refused["error"], refused
        # The loader never saw it: its loads are still the one good id.
        assert ask("m1")["answer"] == {"model": "m1", "loads": ["m0", "m1"]}
        # Through the proxy the header is checked as before.
        assert client.get("/callee", headers={"x-model-id": "../../etc/passwd"}).status_code == 400


def test_a_hot_model_on_one_replica_scales_an_autoscaled_backend_up(cluster: Cluster) -> None:
    # Two requests in flight for one model, both on the replica holding it (not overloaded:
    # 2 <= 2 x 1): the total (2 for 2 replicas at 1 each) wants no more replicas; the hot
    # model's replica at 2 does, as if every replica were that busy.
    autoscaling = AutoscalingConfig(min_replicas=2, max_replicas=3, target_ongoing_requests=1.0,
                                    upscale_delay_s=1.0, downscale_delay_s=60.0)
    met(cluster.client, run(cluster.client.apply_backend(quick_backend(
        "scaled", "multiplex_handlers:ManyModels", autoscaling=autoscaling,
        multiplex=MultiplexConfig(max_models_per_replica=2), version="v1+x2",
    ))))
    met(cluster.client, run(cluster.client.apply_endpoint(
        EndpointConfig(name="scaled", route="/scaled", traffic={"scaled": 1.0})
    )))
    with httpx.Client(base_url=cluster.url, timeout=20) as client:
        eventually(lambda: client.get("/scaled").status_code == 200 or None, 30)
        home = {_ask(client, "/scaled", "hot")["replica"] for _ in range(10)}
    assert len(home) == 1

    stop = time.monotonic() + 40

    def keep_asking(_: int) -> set[str]:
        seen = set()
        with httpx.Client(base_url=cluster.url, timeout=20) as client:
            while time.monotonic() < stop and _replicas(cluster) < 3:
                seen.add(client.get("/scaled", headers={"x-model-id": "hot"}, params={"sleep": 0.5}).json()["replica"])
        return seen

    with ThreadPoolExecutor(2) as pool:
        served = set().union(*pool.map(keep_asking, range(2)))
    assert _replicas(cluster) == 3, "the hot model did not scale the backend up"
    assert served == home  # never overloaded: the model stayed on its replica meanwhile


def _replicas(cluster: Cluster) -> int:
    return run(cluster.client.get_status()).backends["scaled"].target_replicas
