"""The replica state machine with a fake observer and a hand-moved clock."""

from __future__ import annotations

import pytest

from controller.state.backend_state import (
    TRANSITIONS,
    BackendOptions,
    BackendState,
    CheckHealth,
    IllegalTransition,
    KillReplica,
    Probe,
    ProbeStatus,
    Reconfigure,
    ReplicaRecord,
    StartReplica,
    StopReplica,
)
from controller.testing import FakeAdapter
from vocabulary.control.longpoll import ReplicaState
from vocabulary.spec.backends import BackendConfig, UpdateConfig

OK = Probe(ProbeStatus.OK)


def config(version: str = "v1", replicas: int = 2, **extra) -> BackendConfig:
    return BackendConfig(name="echo", version=version, import_path="m:f", num_replicas=replicas,
                         health_check_period_s=1.0, health_check_timeout_s=5.0,
                         graceful_shutdown_timeout_s=2.0, **extra)


def starts(effects) -> list[StartReplica]:
    return [e for e in effects if isinstance(e, StartReplica)]


def stops(effects) -> list[StopReplica]:
    return [e for e in effects if isinstance(e, StopReplica)]


def kills(effects) -> list[KillReplica]:
    return [e for e in effects if isinstance(e, KillReplica)]


def run_ready(state: BackendState, world: FakeAdapter, now: float) -> list:
    """One tick that starts, then one that finds every started replica ready."""
    effects = state.tick(now, world)
    for e in starts(effects):
        world.starts[e.actor_name] = OK
    later = state.tick(now + 0.1, world)
    for e in starts(later):
        world.starts[e.actor_name] = OK
    return effects + later


def states(state: BackendState) -> list[tuple[str, str]]:
    return [(r.version, r.state) for r in state.status("echo").replicas]


def test_new_backend_starts_its_target_number_of_replicas_at_once():
    state = BackendState()
    state.apply(config(replicas=3))
    effects = state.tick(0.0, FakeAdapter())
    assert len(starts(effects)) == 3
    assert state.readiness("echo", "v1") == ("pending", "")


def test_backend_is_ready_once_every_replica_of_the_version_runs():
    state, world = BackendState(), FakeAdapter()
    state.apply(config())
    run_ready(state, world, 0.0)
    assert state.readiness("echo", "v1") == ("met", "")
    assert states(state) == [("v1", "RUNNING"), ("v1", "RUNNING")]


def test_replica_names_are_deterministic_and_never_reused():
    state, world = BackendState(), FakeAdapter()
    state.apply(config(replicas=1))
    first = starts(state.tick(0.0, world))[0]
    assert first.actor_name == "gitops-replica-echo-v1-0"
    world.starts[first.actor_name] = Probe(ProbeStatus.FAILED, "boom")
    state.tick(1.0, world)
    again = starts(state.tick(5.0, world))
    assert [e.actor_name for e in again] == ["gitops-replica-echo-v1-1"]


def test_a_backend_deleted_and_created_again_never_reuses_a_replica_name():
    # The old replica may still be draining under its name (a quick git revert).
    state, world = BackendState(), FakeAdapter()
    state.apply(config(replicas=1))
    first = run_ready(state, world, 0.0)[0]
    state.delete("echo")
    for now in (1.0, 2.0, 3.0):
        state.tick(now, world)
    assert state.all_actor_names() == set()  # fully gone: stopped and forgotten
    state.apply(config(replicas=1))
    restored = BackendState.from_json(state.to_json())
    later = starts(state.tick(4.0, world)) + starts(restored.tick(4.0, world))
    assert len(later) == 2 and first.actor_name not in {e.actor_name for e in later}


def test_rolling_update_starts_one_new_replica_before_draining_any_old_one():
    state, world = BackendState(), FakeAdapter()
    state.apply(config(replicas=2))
    run_ready(state, world, 0.0)
    state.apply(config(version="v2", replicas=2))
    effects = state.tick(1.0, world)
    assert len(starts(effects)) == 1 and not stops(effects)
    world.starts[starts(effects)[0].actor_name] = OK
    effects = state.tick(1.1, world)
    assert len(stops(effects)) == 1 and stops(effects)[0].graceful_timeout_s == 2.0
    assert not stops(effects)[0].failed  # replaced by a new version, not broken: no last output kept
    assert len(starts(effects)) == 1


def test_an_update_without_surge_replaces_a_replica_in_place_before_starting_its_successor():
    state, world = BackendState(), FakeAdapter()
    in_place = {"update": {"max_surge": 0, "max_unavailable": 1}}
    state.apply(config(replicas=2, **in_place))
    run_ready(state, world, 0.0)
    state.apply(config(version="v2", replicas=2, **in_place))
    effects = state.tick(1.0, world)
    assert len(stops(effects)) == 1 and len(starts(effects)) == 1
    live = [r for r in state.status("echo").replicas if r.state.value in ("SHOULD_START", "STARTING", "RUNNING")]
    assert len(live) == 2  # never above the target: no spare capacity needed


def test_rolling_update_ends_with_only_the_new_version():
    state, world = BackendState(), FakeAdapter()
    state.apply(config(replicas=3))
    run_ready(state, world, 0.0)
    state.apply(config(version="v2", replicas=3))
    now = 1.0
    for _ in range(20):
        run_ready(state, world, now)
        now += 0.2
    assert state.readiness("echo", "v2") == ("met", "")
    assert states(state) == [("v2", "RUNNING")] * 3


def test_in_place_user_config_change_reconfigures_without_restarting():
    state, world = BackendState(), FakeAdapter()
    state.apply(config())
    run_ready(state, world, 0.0)
    effects = state.apply(config(user_config={"greeting": "hi"}))
    assert [type(e) for e in effects] == [Reconfigure, Reconfigure]
    later = state.tick(0.5, world)
    assert not starts(later) and not stops(later)


def test_scaling_down_stops_extra_replicas_gracefully():
    state, world = BackendState(), FakeAdapter()
    state.apply(config(replicas=3))
    run_ready(state, world, 0.0)
    state.apply(config(replicas=1))
    effects = state.tick(0.5, world)
    assert len(stops(effects)) == 2 and all(s.graceful_timeout_s == 2.0 for s in stops(effects))


def test_failing_new_version_fails_its_goal_with_the_user_error_and_keeps_old_replicas():
    state = BackendState(BackendOptions(max_failures=3, backoff_base_s=0.5))
    world = FakeAdapter()
    state.apply(config(replicas=2))
    run_ready(state, world, 0.0)
    state.apply(config(version="v2", replicas=2))
    now = 1.0
    for _ in range(60):
        for e in starts(state.tick(now, world)):
            world.starts[e.actor_name] = Probe(ProbeStatus.FAILED, "ImportError: no module named torch")
        now += 0.25
    assert state.readiness("echo", "v2") == ("failed", "ImportError: no module named torch")
    running = [s for s in states(state) if s == ("v1", "RUNNING")]
    assert len(running) == 2
    assert state.status("echo").restarts["startup_failed"] >= 3


def test_failed_starts_back_off_exponentially():
    state = BackendState(BackendOptions(backoff_base_s=1.0, max_failures=10))
    world = FakeAdapter()
    state.apply(config(replicas=1))
    start_times = []
    now = 0.0
    while now < 10.0:
        for e in starts(state.tick(now, world)):
            start_times.append(now)
            world.starts[e.actor_name] = Probe(ProbeStatus.FAILED, "boom")
        now = round(now + 0.1, 1)
    gaps = [round(b - a, 1) for a, b in zip(start_times, start_times[1:])]
    assert gaps[:3] == sorted(gaps[:3]) and gaps[2] >= 2 * gaps[0]


def test_replica_not_ready_within_startup_timeout_is_replaced():
    state = BackendState(BackendOptions(startup_timeout_s=5.0))
    world = FakeAdapter()
    state.apply(config(replicas=1))
    state.tick(0.0, world)
    effects = state.tick(5.0, world)
    assert stops(effects) and stops(effects)[0].graceful_timeout_s == 0
    assert "not ready within 5s" in state.status("echo").last_error
    assert state.status("echo").restarts == {"startup_timeout": 1}


def test_the_startup_timeout_starts_once_ray_has_the_replicas_process_up():
    # 100 replicas on a node of 2 CPUs: Ray starts their processes two at a time, so the
    # last ones wait their turn for longer than their code may take to start.
    state = BackendState(BackendOptions(startup_timeout_s=5.0))
    world = FakeAdapter()
    state.apply(config(replicas=1))
    [start] = starts(state.tick(0.0, world))
    world.queued.add(start.actor_name)
    for now in (1.0, 5.0, 9.0):
        assert not stops(state.tick(now, world)), now  # in Ray's queue: its code's clock has not started
    world.queued.clear()  # up at 9.5
    assert not stops(state.tick(10.0, world))
    assert not stops(state.tick(13.9, world))  # 4.9 s since it was last seen queued
    assert stops(state.tick(14.0, world))
    assert "not ready within 5s" in state.status("echo").last_error


def test_a_replica_whose_process_ray_never_starts_is_given_up():
    state = BackendState(BackendOptions(startup_timeout_s=5.0, process_start_timeout_s=60.0))
    world = FakeAdapter()
    state.apply(config(replicas=1))
    [start] = starts(state.tick(0.0, world))
    world.queued.add(start.actor_name)
    assert not stops(state.tick(59.0, world))
    effects = state.tick(60.0, world)
    assert stops(effects) and stops(effects)[0].graceful_timeout_s == 0
    assert state.status("echo").last_error.endswith("Ray did not start its process within 60s")
    assert state.status("echo").restarts == {"startup_timeout": 1}


def test_a_backends_own_startup_timeout_overrides_the_controllers_and_three_in_a_row_fail_it():
    state = BackendState(BackendOptions(startup_timeout_s=60.0, backoff_base_s=0.1, backoff_max_s=0.1))
    world = FakeAdapter()
    state.apply(config(replicas=1, startup_timeout_s=2.0))
    state.tick(0.0, world)
    assert not stops(state.tick(1.9, world))  # within its own 2 s
    effects = state.tick(2.0, world)
    assert stops(effects) and stops(effects)[0].graceful_timeout_s == 0  # given up: killed, not drained
    assert "not ready within 2s" in state.status("echo").last_error
    now = 2.0
    while state.readiness("echo", "v1")[0] == "pending" and now < 30:
        now = round(now + 0.1, 1)
        state.tick(now, world)
    result, reason = state.readiness("echo", "v1")
    assert result == "failed" and reason.endswith("not ready within 2s"), (result, reason)
    assert state.status("echo").restarts["startup_timeout"] == 3
    assert now < 10  # three tries of 2 s and their backoff, not three of the controller's 60 s


def test_failed_health_check_replaces_the_replica_and_counts_the_reason():
    state, world = BackendState(), FakeAdapter()
    state.apply(config(replicas=1))
    run_ready(state, world, 0.0)
    effects = state.tick(1.5, world)
    [check] = [e for e in effects if isinstance(e, CheckHealth)]
    world.health[check.actor_name] = Probe(ProbeStatus.FAILED, "RuntimeError: sick")
    effects = state.tick(1.6, world)
    assert stops(effects)[0].actor_name == check.actor_name
    assert stops(effects)[0].failed  # its last output is read before the kill (gitops logs --previous)
    assert state.status("echo").restarts == {"health_check": 1}
    assert state.status("echo").last_error == "RuntimeError: sick"


def test_dead_replica_is_replaced_without_counting_as_a_user_failure():
    state, world = BackendState(), FakeAdapter()
    state.apply(config(replicas=1))
    run_ready(state, world, 0.0)
    [check] = [e for e in state.tick(1.5, world) if isinstance(e, CheckHealth)]
    world.health[check.actor_name] = Probe(ProbeStatus.DEAD, "actor died")
    effects = state.tick(1.6, world) + state.tick(1.7, world)
    assert len(starts(effects)) == 1
    assert state.status("echo").restarts == {"died": 1}
    assert state.status("echo").failures == 0


def test_a_dead_replica_is_reported_once_by_backend_replica_and_reason():
    state, world = BackendState(), FakeAdapter()
    state.apply(config(replicas=1))
    run_ready(state, world, 0.0)
    [check] = [e for e in state.tick(1.5, world) if isinstance(e, CheckHealth)]
    world.health[check.actor_name] = Probe(ProbeStatus.DEAD, "exit SIGKILL")
    state.take_failures()
    state.tick(1.6, world)
    [failure] = state.take_failures()
    assert failure.message() == f"replica {failure.replica_id} of backend echo died: exit SIGKILL; a replacement starts"
    assert check.actor_name.endswith(failure.replica_id) and state.take_failures() == []


def test_replica_on_a_lost_node_is_replaced_without_waiting_for_a_health_check():
    state, world = BackendState(), FakeAdapter()
    state.apply(config(replicas=1))
    run_ready(state, world, 0.0)
    world.dead_nodes.add("node-1")
    effects = state.tick(0.3, world)
    assert len(stops(effects)) == 1 and len(starts(effects)) == 1
    assert state.status("echo").restarts == {"node_lost": 1}


def test_cluster_without_room_fails_the_goal_with_the_reason_after_a_grace():
    state = BackendState(BackendOptions(unschedulable_grace_s=2.0))
    world = FakeAdapter(no_room="no alive node has GPU=1 available")
    state.apply(config(replicas=1, ray_actor_options={"num_gpus": 1}))
    assert not starts(state.tick(0.0, world))
    assert state.readiness("echo", "v1")[0] == "pending"
    state.tick(2.5, world)
    verdict, reason = state.readiness("echo", "v1")
    assert verdict == "failed" and "GPU=1" in reason


def test_an_in_place_update_on_a_full_cluster_waits_for_its_stopping_replica_instead_of_failing():
    state = BackendState(BackendOptions(unschedulable_grace_s=2.0))
    world = FakeAdapter()
    state.apply(config(replicas=1))
    run_ready(state, world, 0.0)
    world.no_room = "no alive node has CPU=1 available"  # the old replica holds the last CPU
    state.apply(config("v2", replicas=1, update=UpdateConfig(max_surge=0, max_unavailable=1)))
    assert len(stops(state.tick(1.0, world))) == 1
    state.tick(5.0, world)  # still draining, well past the grace
    assert state.readiness("echo", "v2")[0] == "pending"


def test_delete_drains_every_replica_then_forgets_the_backend():
    state, world = BackendState(), FakeAdapter()
    state.apply(config())
    run_ready(state, world, 0.0)
    state.delete("echo")
    effects = state.tick(1.0, world)
    assert len(stops(effects)) == 2
    for t in (1.1, 1.2, 1.3):
        state.tick(t, world)
    assert state.is_gone("echo")


def test_stopped_replica_is_killed_once_its_drain_finished():
    state, world = BackendState(), FakeAdapter()
    state.apply(config(replicas=1))
    run_ready(state, world, 0.0)
    state.set_target("echo", 0)
    [stop] = stops(state.tick(1.0, world))
    world.draining.add(stop.actor_name)
    assert not kills(state.tick(1.1, world))
    world.draining.clear()
    assert kills(state.tick(1.2, world)) == [KillReplica(stop.actor_name)]


def test_replica_whose_drain_hangs_is_killed_past_its_deadline():
    state = BackendState(BackendOptions(stop_grace_s=2.0))
    world = FakeAdapter()
    state.apply(config(replicas=1))  # graceful_shutdown_timeout_s=2.0
    run_ready(state, world, 0.0)
    state.set_target("echo", 0)
    [stop] = stops(state.tick(1.0, world))
    world.draining.add(stop.actor_name)
    assert not kills(state.tick(4.9, world))
    assert kills(state.tick(5.0, world)) == [KillReplica(stop.actor_name)]


def test_set_target_is_the_one_knob_for_replica_count():
    state, world = BackendState(), FakeAdapter()
    state.apply(config(replicas=1))
    run_ready(state, world, 0.0)
    state.set_target("echo", 3)
    assert len(starts(state.tick(1.0, world))) == 2


def test_checkpoint_round_trip_keeps_replicas_and_counters():
    state, world = BackendState(), FakeAdapter()
    state.apply(config())
    run_ready(state, world, 0.0)
    copy = BackendState.from_json(state.to_json())
    assert copy.to_json() == state.to_json()


def test_recovery_keeps_found_running_replicas_and_replaces_lost_ones():
    state, world = BackendState(), FakeAdapter()
    state.apply(config())
    run_ready(state, world, 0.0)
    names = sorted(state.all_actor_names())
    restored = BackendState.from_json(state.to_json())
    restored.recover(0.0, found={names[0]})
    assert states(restored) == [("v1", "RUNNING")]
    assert restored.status("echo").restarts == {"lost": 1}
    effects = restored.tick(0.1, FakeAdapter())
    assert len(starts(effects)) == 1 and starts(effects)[0].actor_name not in names


def test_recovery_restarts_starting_replicas_under_the_same_name():
    state = BackendState()
    state.apply(config(replicas=1))
    [start] = starts(state.tick(0.0, FakeAdapter()))
    restored = BackendState.from_json(state.to_json())
    restored.recover(0.0, found=set())
    [again] = starts(restored.tick(0.1, FakeAdapter()))
    assert again.actor_name == start.actor_name


def test_recovery_stops_replicas_that_were_on_their_way_out():
    state, world = BackendState(), FakeAdapter()
    state.apply(config(replicas=1))
    run_ready(state, world, 0.0)
    state.set_target("echo", 0)
    state._backends["echo"].replicas[0].move(ReplicaState.SHOULD_STOP, 1.0)
    restored = BackendState.from_json(state.to_json())
    restored.recover(0.0, found=set(state.all_actor_names()))
    assert stops(restored.tick(0.1, FakeAdapter()))


# --- the lifecycle's transition table -----------------------------------------------

S = ReplicaState
LIFECYCLE = [
    (S.SHOULD_START, S.STARTING), (S.STARTING, S.RUNNING), (S.RUNNING, S.SHOULD_STOP),
    (S.SHOULD_STOP, S.STOPPING), (S.STOPPING, S.STOPPED),
]
ALL_MOVES = [(a, b) for a in S for b in S]


@pytest.mark.parametrize("before,after", LIFECYCLE, ids=lambda s: s.value)
def test_replica_lifecycle_moves_forward_through_each_state(before, after):
    record = ReplicaRecord("r", "v1", before)
    record.move(after, 1.0)
    assert (record.state, record.since) == (after, 1.0)


@pytest.mark.parametrize(
    "before,after", [m for m in ALL_MOVES if m[1] not in TRANSITIONS[m[0]]],
    ids=lambda s: s.value,
)
def test_move_outside_the_transition_table_is_refused(before, after):
    record = ReplicaRecord("r", "v1", before)
    with pytest.raises(IllegalTransition, match=f"{before.value} -> {after.value}"):
        record.move(after, 1.0)
    assert record.state == before


def test_stopped_is_the_only_final_state():
    assert [state for state in S if not TRANSITIONS[state]] == [S.STOPPED]


def test_a_health_check_answer_carries_the_replicas_latest_handler_error_into_the_status():
    from vocabulary.control.status import HandlerError

    state, world = BackendState(), FakeAdapter()
    state.apply(config(replicas=1))
    run_ready(state, world, 0.0)
    [check] = [e for e in state.tick(1.5, world) if isinstance(e, CheckHealth)]
    raised = HandlerError(type="KeyError", message="'x'", where="deployments/a.py:3", at=10.0, replica_id="r")
    world.health[check.actor_name] = Probe(ProbeStatus.OK, handler_error=raised)
    state.tick(1.6, world)
    assert state.status("echo").latest_error == raised
    assert state.status("echo").restarts == {}  # an erring handler is no failed replica


def test_check_soon_health_checks_running_replicas_at_the_next_tick():
    state, world = BackendState(), FakeAdapter()
    state.apply(config(replicas=2))  # health checked every second
    run_ready(state, world, 0.0)
    assert not [e for e in state.tick(0.5, world) if isinstance(e, CheckHealth)]
    state.check_soon("echo")
    assert len([e for e in state.tick(0.6, world) if isinstance(e, CheckHealth)]) == 2
