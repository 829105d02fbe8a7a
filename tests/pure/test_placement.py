"""A backend's [placement]: what one replica reserves,
why nodes cannot offer it (the status's Pending line), where max_replicas_per_node sends
a replica, the one-at-a-time update of a GPU backend with no spare GPUs, and what a plan
says of GPUs."""

from __future__ import annotations

from controller.state.backend_state import BackendOptions, BackendState, Probe, ProbeStatus, StartReplica, StopReplica
from controller.testing import FakeAdapter
from gitops.reconcile.gpus import capacity_problems, gpu_lines
from gitops.reconcile.planner import plan
from gitops.reconcile.plans import Plan
from vocabulary.control.status import NodeResources
from vocabulary.spec.state import ServingState
from vocabulary.spec.backends import BackendConfig, UpdateConfig
from vocabulary.spec.placement import (
    PlacementConfig,
    PlacementStrategy,
    bundle_text,
    largest_bundle_problem,
    replica_bundles,
    replica_gpus,
    spread_node,
    unplaceable,
)

def test_what_one_replica_reserves() -> None:
    placement = PlacementConfig(bundles=({"GPU": 2, "CPU": 1}, {"GPU": 2}))
    assert replica_bundles(placement, {"num_gpus": 1}) == [{"GPU": 2, "CPU": 1}, {"GPU": 2}]
    assert replica_gpus(placement, {}) == 4
    assert replica_bundles(None, {"num_gpus": 1, "num_cpus": 0}) == [{"GPU": 1}]
    assert replica_gpus(None, {"num_cpus": 1}) == 0
    assert bundle_text({"CPU": 2, "GPU": 4, "memory": 1e9}) == "{GPU: 4, CPU: 2, memory: 1e+09}"


def test_why_nodes_cannot_offer_a_replica() -> None:
    four = [{"GPU": 1}] * 4
    two_nodes = [{"GPU": 2, "CPU": 8}, {"GPU": 2, "CPU": 8}]
    assert unplaceable(four, PlacementStrategy.STRICT_PACK, two_nodes) == "no node offers {GPU: 4} in one bundle set"
    assert unplaceable(four, PlacementStrategy.PACK, two_nodes) == ""
    assert unplaceable([{"GPU": 1}] * 3, PlacementStrategy.STRICT_SPREAD, two_nodes) == (
        "no node offers {GPU: 1} (a node of its own for each of 3 bundles)")
    assert unplaceable([{"GPU": 1}] * 2, PlacementStrategy.STRICT_SPREAD, two_nodes) == ""
    assert unplaceable([{"GPU": 3}], PlacementStrategy.SPREAD, two_nodes) == "no node offers {GPU: 3} in one bundle set"


def test_a_bundle_larger_than_any_node_is_named() -> None:
    nodes = [{"GPU": 2, "CPU": 8}, {"GPU": 2, "CPU": 8}]
    assert largest_bundle_problem(PlacementConfig(bundles=({"GPU": 4},)), {}, nodes) == (
        "a bundle asks for 4 GPU but the largest node of the cluster has 2")
    assert largest_bundle_problem(
        PlacementConfig(bundles=({"GPU": 2}, {"GPU": 2}), strategy="STRICT_PACK"), {}, nodes
    ) == "STRICT_PACK needs {GPU: 4} on one node and no node of the cluster has that much"
    assert largest_bundle_problem(PlacementConfig(bundles=({"GPU": 2}, {"GPU": 2})), {}, nodes) == ""
    assert largest_bundle_problem(None, {"num_gpus": 1}, []) == ""  # the cluster is not known


def test_max_replicas_per_node_sends_a_replica_to_the_emptiest_open_node() -> None:
    assert spread_node({}, ["a", "b"], 1) == "a"
    assert spread_node({"a": 1}, ["a", "b"], 1) == "b"
    assert spread_node({"a": 1, "b": 1}, ["a", "b"], 1) is None
    assert spread_node({"a": 1, "b": 2}, ["a", "b"], 3) == "a"


OK = Probe(ProbeStatus.OK)


def gpu_backend(version: str, update: UpdateConfig | None = None) -> BackendConfig:
    return BackendConfig(name="chat", version=version, import_path="m:C", num_replicas=2, update=update,
                         placement=PlacementConfig(bundles=({"GPU": 1},)), ray_actor_options={"num_gpus": 1})


def running(state: BackendState, world: FakeAdapter, now: float) -> float:
    """Ticks until every started replica has answered its start (the fake says OK)."""
    for _ in range(3):
        for effect in state.tick(now, world):
            if isinstance(effect, StartReplica):
                world.starts[effect.actor_name] = OK
        now += 0.1
    return now


def test_a_replica_that_cannot_be_placed_says_why_in_the_status() -> None:
    state, world = BackendState(BackendOptions(unschedulable_grace_s=60)), FakeAdapter()
    world.no_room = "no node offers {GPU: 4} in one bundle set"
    state.apply(gpu_backend("v1"))
    state.tick(0.0, world)
    assert state.status("chat").pending == "Pending: no node offers {GPU: 4} in one bundle set"
    world.no_room = ""
    state.tick(0.1, world)
    assert state.status("chat").pending == ""


def test_an_update_with_no_spare_gpu_replaces_one_replica_at_a_time() -> None:
    state, world = BackendState(BackendOptions(unschedulable_grace_s=1.0)), FakeAdapter()
    state.apply(gpu_backend("v1"))
    now = running(state, world, 0.0)
    assert [r.state.value for r in state.replicas("chat")] == ["RUNNING", "RUNNING"]
    world.no_room = "no node offers {GPU: 1} in one bundle set"  # the two replicas hold every GPU
    state.apply(gpu_backend("v2"))
    effects = state.tick(now, world)
    assert len([e for e in effects if isinstance(e, StopReplica)]) == 1  # in place, not a surge replica
    assert not [e for e in effects if isinstance(e, StartReplica)]
    state.tick(now + 5, world)  # well past the grace: the update waits for its stopping replica, never fails
    assert state.readiness("chat", "v2")[0] == "pending"


def test_a_cpu_backend_on_a_full_cluster_still_fails_as_before() -> None:
    state, world = BackendState(BackendOptions(unschedulable_grace_s=1.0)), FakeAdapter()
    cpu = BackendConfig(name="chat", version="v1", import_path="m:C", num_replicas=2)
    state.apply(cpu)
    now = running(state, world, 0.0)
    world.no_room = "no alive node has CPU=1 available"
    state.apply(cpu.model_copy(update={"version": "v2"}))
    effects = state.tick(now, world)
    assert not [e for e in effects if isinstance(e, StopReplica)]
    state.tick(now + 2, world)
    assert state.readiness("chat", "v2")[0] == "failed"


def nodes(*free_gpus: float, total: float = 2) -> dict[str, NodeResources]:
    return {f"n{i}": NodeResources(total={"GPU": total, "CPU": 8}, available={"GPU": gpus, "CPU": 8})
            for i, gpus in enumerate(free_gpus)}


def update_plan(old: BackendConfig, new: BackendConfig) -> tuple[Plan, ServingState, ServingState]:
    actual, desired = ServingState(backends={"chat": old}), ServingState(backends={"chat": new})
    return plan(desired, actual), desired, actual


def test_plan_says_the_gpus_a_change_needs_and_that_an_update_with_none_spare_goes_one_at_a_time() -> None:
    result, desired, actual = update_plan(gpu_backend("v1"), gpu_backend("v2"))
    assert gpu_lines(result, desired, actual, nodes(0, 0)) == [
        "GPUs of chat: 2 × 1 = 2 GPU (now 2); 0 GPU free in the cluster",
        "rolling update of chat: no spare GPUs for a surge replica ({GPU: 1} not free: no node offers {GPU: 1} "
        "in one bundle set); the update goes one replica at a time",
    ]
    assert gpu_lines(result, desired, actual, nodes(1, 0))[1] == (
        "rolling update of chat: 1 surge replica(s) fit in the free GPUs")
    assert gpu_lines(result, desired, actual, None)[1] == (
        "rolling update of chat: whether GPUs are free for a surge replica is known with --live")


def test_plan_says_nothing_of_gpus_for_a_backend_without_any() -> None:
    cpu = BackendConfig(name="chat", version="v1", import_path="m:C")
    result, desired, actual = update_plan(cpu, cpu.model_copy(update={"version": "v2"}))
    assert result and gpu_lines(result, desired, actual, nodes(2)) == []


def test_a_bundle_larger_than_every_node_is_a_capacity_problem() -> None:
    big = gpu_backend("v1").model_copy(update={"placement": PlacementConfig(bundles=({"GPU": 4},))})
    desired = ServingState(backends={"chat": big})
    assert capacity_problems(desired, nodes(2, 2)) == {
        "chat": "a bundle asks for 4 GPU but the largest node of the cluster has 2"}
    assert capacity_problems(desired, nodes(2, 2, total=4)) == {}
    assert capacity_problems(desired, {}) == {}  # the cluster is not known yet: nothing refused
