"""Progressive delivery on a real controller and proxy, with real traffic on loopback.

A traffic change of an endpoint with [rollout] moves in steps, judged on the
proxy's own counts (its load reports): a good canary is promoted through
every step; one that fails 20% of its requests is aborted at its first step
and its traffic goes back to the old split within one step interval; a step
survives a controller kill. Header match, sticky users and shadow
comparison go through the same real proxy.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from typing import Any, Iterator

import httpx
import pytest
import ray

from controller.client import ControllerClient
from controller.shell.ray_adapter import PROXY_PREFIX
from gitops.admin.shadow_mismatches import collect, proxies_to_ask
from tests.support.stack import eventually, met, named_actors, quick_backend, run, start_controller
from vocabulary.control.goals import GoalState
from vocabulary.control.longpoll import ReplicaState
from vocabulary.control.rollouts import CheckName, Rollout, RolloutPhase
from vocabulary.spec.backends import UpdateConfig
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.rollout_config import RolloutConfig

pytestmark = pytest.mark.real


class Traffic:
    """Requests sent back to back in a thread; which backend answered, with which status."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._stop = threading.Event()
        self.answers: list[tuple[float, str, int]] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with httpx.Client(timeout=5) as client:
            while not self._stop.is_set():
                reply = client.get(self._url)
                backend = reply.json()["backend"] if reply.headers.get("content-type") == "application/json" else "?"
                self.answers.append((time.monotonic(), backend, reply.status_code))

    def since(self, moment: float) -> Counter[str]:
        return Counter(backend for at, backend, _ in list(self.answers) if at >= moment)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def answered(traffic: Traffic, since: float, at_least: int) -> Counter[str] | None:
    """The backends that answered after `since`, once there are `at_least` answers."""
    seen = traffic.since(since)
    return seen if sum(seen.values()) >= at_least else None


class Cluster:
    def __init__(self, namespace: str, **options: Any) -> None:
        self.client: ControllerClient = start_controller(namespace, proxies=True, **options)
        names = eventually(lambda: named_actors(namespace, PROXY_PREFIX), 60)
        proxy = ray.get_actor(min(names), namespace=namespace)
        self.url = "http://" + ray.get(proxy.ready.remote(), timeout=30)

    def backend(self, name: str, error_share: float = 0.0, delay_s: float = 0.0) -> None:
        config = quick_backend(name, "canary_handlers:Versioned", init_args=(name, error_share, delay_s), version=name)
        met(self.client, run(self.client.apply_backend(config)))

    def endpoint(self, name: str, traffic: dict[str, float], rollout: RolloutConfig) -> None:
        config = EndpointConfig(name=name, route=f"/{name}", methods=("GET",), traffic=traffic, rollout=rollout)
        met(self.client, run(self.client.apply_endpoint(config)))

    def rollout(self, endpoint: str) -> Rollout | None:
        return run(self.client.get_status()).rollouts.get(endpoint)


@pytest.fixture(scope="module")
def cluster(ray_session: str) -> Iterator[Cluster]:
    built = Cluster(f"{ray_session}-rollouts-{uuid.uuid4().hex[:6]}")
    yield built
    built.client.shutdown()


def test_a_good_canary_is_promoted_through_every_step(cluster: Cluster) -> None:
    cluster.backend("good-v1")
    cluster.backend("good-v2")
    steps = RolloutConfig(steps=(0.25, 0.5, 1.0), step_interval_s=1.5, min_requests=10, max_error_ratio=0.05)
    cluster.endpoint("good", {"good-v1": 1.0}, steps)
    traffic = Traffic(f"{cluster.url}/good")
    try:
        cluster.endpoint("good", {"good-v2": 1.0}, steps)
        seen: set[int] = set()

        def promoted() -> bool:
            rollout = cluster.rollout("good")
            assert rollout is not None and rollout.phase is not RolloutPhase.ABORTED, rollout
            seen.add(rollout.display_step())
            return rollout.phase is RolloutPhase.PROMOTED

        eventually(promoted, 60, 0.1, what="the rollout to be promoted")
        settled = time.monotonic() + 1.0  # a long-poll round trip for the proxy to hear of it
        after = eventually(lambda: answered(traffic, settled, 20), 20)
    finally:
        traffic.stop()
    assert seen >= {1, 2, 3}
    assert set(after) == {"good-v2"}
    final = cluster.rollout("good")
    assert final is not None and all(check.passed for check in final.checks)


def test_a_canary_failing_a_fifth_of_its_requests_is_aborted_at_its_first_step(cluster: Cluster) -> None:
    cluster.backend("bad-v1")
    cluster.backend("bad-v2", error_share=0.2)
    steps = RolloutConfig(steps=(0.25, 0.5, 1.0), step_interval_s=5, min_requests=10, max_error_ratio=0.05)
    cluster.endpoint("bad", {"bad-v1": 1.0}, steps)
    traffic = Traffic(f"{cluster.url}/bad")
    try:
        started = time.monotonic()
        cluster.endpoint("bad", {"bad-v2": 1.0}, steps)
        aborted = eventually(
            lambda: (r := cluster.rollout("bad")) is not None and r.phase is RolloutPhase.ABORTED and r, 30, 0.05,
            what="the rollout to be aborted",
        )
        stopped = time.monotonic()
        after = eventually(lambda: answered(traffic, stopped + 1.0, 30), 20)
    finally:
        traffic.stop()
    assert stopped - started < steps.step_interval_s
    assert aborted.display_step() == 0 and aborted.step == 0
    [failed] = aborted.failed()
    assert (failed.name, failed.backend, failed.threshold) == (CheckName.ERROR_RATIO, "bad-v2", 0.05)
    assert 0.1 <= failed.measured <= 0.3
    assert set(after) == {"bad-v1"}
    # The same target again is not retried.
    cluster.endpoint("bad", {"bad-v2": 1.0}, steps)
    assert cluster.rollout("bad") == aborted


def test_a_slow_canary_is_aborted_on_its_p99(cluster: Cluster) -> None:
    cluster.backend("slow-v1")
    cluster.backend("slow-v2", delay_s=0.3)
    steps = RolloutConfig(steps=(0.5, 1.0), step_interval_s=5, min_requests=5, max_p99_latency_s=0.1)
    cluster.endpoint("slow", {"slow-v1": 1.0}, steps)
    traffic = Traffic(f"{cluster.url}/slow")
    try:
        cluster.endpoint("slow", {"slow-v2": 1.0}, steps)
        aborted = eventually(
            lambda: (r := cluster.rollout("slow")) is not None and r.phase is RolloutPhase.ABORTED and r, 30, 0.05,
            what="the rollout to be aborted",
        )
    finally:
        traffic.stop()
    [failed] = aborted.failed()
    assert (failed.name, failed.backend, failed.threshold) == (CheckName.P99_LATENCY, "slow-v2", 0.1)
    assert failed.measured >= 0.3
    assert "slow-v2: p99_latency" in aborted.message()


def test_a_rollout_goes_on_from_its_step_after_a_controller_kill(cluster: Cluster) -> None:
    cluster.backend("kept-v1")
    cluster.backend("kept-v2")
    steps = RolloutConfig(steps=(0.2, 0.4, 0.6, 1.0), step_interval_s=2.0, min_requests=5, max_error_ratio=0.05)
    cluster.endpoint("kept", {"kept-v1": 1.0}, steps)
    traffic = Traffic(f"{cluster.url}/kept")
    try:
        cluster.endpoint("kept", {"kept-v2": 1.0}, steps)
        before = eventually(lambda: (r := cluster.rollout("kept")) is not None and r.step >= 1 and r, 30, 0.1)
        ray.kill(cluster.client.handle, no_restart=False)
        after = eventually(lambda: cluster.rollout("kept"), 30, 0.2, retry_on=(Exception,))
        assert after.step >= before.step and after.before == {"kept-v1": 1.0}
        eventually(lambda: cluster.rollout("kept").phase is RolloutPhase.PROMOTED, 60, 0.2, retry_on=(Exception,))
    finally:
        traffic.stop()


def test_header_match_and_sticky_users_through_a_real_proxy(cluster: Cluster) -> None:
    cluster.backend("pin-v1")
    cluster.backend("pin-v2")
    config = EndpointConfig(
        name="pin", route="/pin", methods=("GET",), traffic={"pin-v1": 0.5, "pin-v2": 0.5}, sticky="header:x-user",
        match=({"header": "x-canary", "value": "always", "backend": "pin-v2"},),
    )
    met(cluster.client, run(cluster.client.apply_endpoint(config)))
    with httpx.Client(base_url=cluster.url, timeout=5) as client:
        pinned = {client.get("/pin", headers={"x-canary": "always", "x-user": f"u{n}"}).json()["backend"] for n in range(20)}
        users = [{client.get("/pin", headers={"x-user": f"u{n}"}).json()["backend"] for _ in range(5)} for n in range(20)]
    assert pinned == {"pin-v2"}
    assert all(len(seen) == 1 for seen in users)
    assert {backend for seen in users for backend in seen} == {"pin-v1", "pin-v2"}


def mismatches(cluster: Cluster) -> list[dict[str, Any]]:
    """What the agent's `GET /shadow/mismatches` gathers: every proxy asked over Ray."""
    proxies = proxies_to_ask(run(cluster.client.get_status()))
    return run(collect(cluster.client.proxy_mismatches, proxies, timeout_s=5.0))["mismatches"]


def test_shadow_replies_are_compared_and_mismatches_sampled_at_the_proxy(cluster: Cluster) -> None:
    cluster.backend("cmp-v1")
    cluster.backend("cmp-v2", error_share=1.0)
    config = EndpointConfig(name="cmp", route="/cmp", methods=("GET",), traffic={"cmp-v1": 1.0},
                            shadow={"cmp-v2": 1.0}, shadow_compare="status")
    met(cluster.client, run(cluster.client.apply_endpoint(config)))
    with httpx.Client(base_url=cluster.url, timeout=5) as client:
        assert [client.get("/cmp").status_code for _ in range(5)] == [200] * 5
        sample = eventually(lambda: mismatches(cluster), 10)
        assert client.get("/-/shadow/mismatches").status_code == 404  # asked over Ray, never on the public port
    assert (sample[0]["endpoint"], sample[0]["backend"], sample[0]["diff"]) == ("cmp", "cmp-v2", "status 200 != 500")


def test_max_surge_zero_updates_a_backend_that_fills_the_cluster_in_place(cluster: Cluster) -> None:
    """Two replicas take all the free memory Ray schedules by: a code update with max_surge = 0
    still finishes, one replica at a time, never serving or starting more than the target.
    (Memory rather than CPU: the session's Ray may be shared with other workers' tests, which
    ask for CPU and never for memory.)"""
    share = int(ray.available_resources().get("memory", 0.0) // 2)
    assert share > 0, "the session's Ray has no free memory to fill"
    first = quick_backend("inplace", "canary_handlers:Versioned", init_args=("a",), version="a", num_replicas=2,
                          ray_actor_options={"num_cpus": 0, "memory": share})
    met(cluster.client, run(cluster.client.apply_backend(first)))
    update = UpdateConfig(max_surge=0, max_unavailable=1)
    second = first.model_copy(update={"version": "b", "init_args": ("b",), "update": update})
    goal = run(cluster.client.apply_backend(second))
    active: list[int] = []

    def updated() -> bool:
        replicas = run(cluster.client.get_status()).backends["inplace"].replicas
        active.append(sum(r.state in (ReplicaState.STARTING, ReplicaState.RUNNING) for r in replicas))
        result = run(cluster.client.wait_for_goal(goal, 0.01))
        assert result.state is not GoalState.FAILED, result
        return result.state is GoalState.MET

    try:
        eventually(updated, 90, 0.02, what="the in-place update to finish on a full cluster")
        final = run(cluster.client.get_status()).backends["inplace"].replicas
    finally:
        met(cluster.client, run(cluster.client.delete_backend("inplace")))  # give the memory back
    assert max(active) <= 2
    assert sorted(r.version for r in final if r.state is ReplicaState.RUNNING) == ["b", "b"]
