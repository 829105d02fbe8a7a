"""Goals as predicates: idempotent requests, supersession, and the judge."""

from __future__ import annotations

from controller.state.backend_state import BackendState
from controller.state.endpoint_state import EndpointState
from controller.state.goals import PENDING, GoalKind, GoalTable, Judgement
from controller.state.judging import fingerprint, judge
from controller.state.longpoll import LongPollHost
from controller.testing import FakeAdapter
from vocabulary.control.goal_api import LongPollKey
from vocabulary.control.goals import GoalState
from vocabulary.spec.backends import BackendConfig
from vocabulary.spec.endpoints import EndpointConfig

MET = Judgement(GoalState.MET)


def run_ready(backends: BackendState) -> None:
    """Two ticks of a cluster where every replica is ready as soon as it is started."""
    cluster = FakeAdapter()
    cluster.apply(backends.tick(0.0, cluster))
    backends.tick(0.1, cluster)


def backend(version: str = "v1", replicas: int = 1) -> BackendConfig:
    return BackendConfig(name="echo", version=version, import_path="m:f", num_replicas=replicas)


def test_identical_request_returns_the_same_pending_goal():
    table = GoalTable()
    first = table.request(GoalKind.BACKEND_READY, "echo", "fp", 0.0)
    assert table.request(GoalKind.BACKEND_READY, "echo", "fp", 1.0) == first


def test_identical_request_after_the_goal_was_met_returns_a_met_goal():
    table = GoalTable()
    goal_id = table.request(GoalKind.BACKEND_READY, "echo", "fp", 0.0)
    table.evaluate(lambda goal: MET, 1.0)
    again = table.request(GoalKind.BACKEND_READY, "echo", "fp", 2.0)
    assert table.result(again).state == GoalState.MET and again == goal_id


def test_request_after_a_failed_goal_is_judged_afresh():
    table = GoalTable()
    failed = table.request(GoalKind.BACKEND_READY, "echo", "fp", 0.0)
    table.evaluate(lambda goal: Judgement(GoalState.FAILED, "boom"), 1.0)
    retry = table.request(GoalKind.BACKEND_READY, "echo", "fp", 2.0)
    assert retry != failed and table.result(retry).state == GoalState.PENDING


def test_finished_goals_are_final():
    table = GoalTable()
    goal_id = table.request(GoalKind.BACKEND_READY, "echo", "fp", 0.0)
    table.evaluate(lambda goal: MET, 1.0)
    table.evaluate(lambda goal: Judgement(GoalState.FAILED, "late"), 2.0)
    assert table.result(goal_id).state == GoalState.MET


def test_pending_goals_survive_a_json_round_trip():
    table = GoalTable()
    goal_id = table.request(GoalKind.ENDPOINT_ACKED, "api", "fp", 0.0)
    restored = GoalTable.from_json(table.to_json())
    assert restored.result(goal_id).state == GoalState.PENDING
    restored.evaluate(lambda goal: MET, 1.0)
    assert restored.result(goal_id).state == GoalState.MET


def test_goal_durations_are_reported_for_metrics():
    table = GoalTable()
    table.request(GoalKind.BACKEND_READY, "echo", "fp", 10.0)
    table.evaluate(lambda goal: MET, 12.5)
    [entry] = table.durations()
    assert entry["duration_s"] == 2.5 and entry["kind"] == "backend_ready"


def judged(goal_id, table, backends, endpoints, longpoll, proxies=()):
    table.evaluate(lambda g: judge(g, backends, endpoints, longpoll, proxies), 0.0)
    return table.result(goal_id)


def test_backend_goal_is_met_when_its_version_runs_its_target():
    backends, table = BackendState(), GoalTable()
    backends.apply(backend())
    goal_id = table.request(GoalKind.BACKEND_READY, "echo", fingerprint(backend()), 0.0)
    assert judged(goal_id, table, backends, EndpointState(), LongPollHost()).state == GoalState.PENDING
    run_ready(backends)
    assert judged(goal_id, table, backends, EndpointState(), LongPollHost()).state == GoalState.MET


def test_backend_goal_is_superseded_by_a_newer_version():
    backends, table = BackendState(), GoalTable()
    backends.apply(backend())
    goal_id = table.request(GoalKind.BACKEND_READY, "echo", fingerprint(backend()), 0.0)
    backends.apply(backend(version="v2"))
    assert judged(goal_id, table, backends, EndpointState(), LongPollHost()).state == GoalState.SUPERSEDED


def test_backend_goal_waits_for_subscribed_proxies_to_hold_the_new_replica_set():
    backends, table, longpoll = BackendState(), GoalTable(), LongPollHost()
    backends.apply(backend())
    run_ready(backends)
    key = LongPollKey.replicas("echo")
    longpoll.record_ack("p1", {key: 1})
    longpoll.publish(key, "set", "set")
    goal_id = table.request(GoalKind.BACKEND_READY, "echo", fingerprint(backend()), 0.0)
    assert judged(goal_id, table, backends, EndpointState(), longpoll, ["p1"]).state == GoalState.PENDING
    longpoll.record_ack("p1", {key: longpoll.snapshot_id(key)})
    assert judged(goal_id, table, backends, EndpointState(), longpoll, ["p1"]).state == GoalState.MET


def test_endpoint_goal_needs_every_live_proxy_to_acknowledge():
    backends, endpoints, table, longpoll = BackendState(), EndpointState(), GoalTable(), LongPollHost()
    backends.apply(backend())
    config = EndpointConfig(name="api", route="/api", traffic={"echo": 1.0})
    endpoints.apply(config, {"echo"})
    for key, value in [("routes", "t"), ("endpoint:api", config), ("replicas:echo", "s")]:
        longpoll.publish(key, value, value)
    goal_id = table.request(GoalKind.ENDPOINT_ACKED, "api", fingerprint(config), 0.0)
    current = {k: longpoll.snapshot_id(k) for k in longpoll.keys()}
    longpoll.record_ack("p1", current)
    assert judged(goal_id, table, backends, endpoints, longpoll, ["p1", "p2"]).state == GoalState.PENDING
    longpoll.record_ack("p2", current)
    assert judged(goal_id, table, backends, endpoints, longpoll, ["p1", "p2"]).state == GoalState.MET


def test_endpoint_goal_waits_for_a_starting_proxy_to_serve():
    endpoints, table, longpoll = EndpointState(), GoalTable(), LongPollHost()
    config = EndpointConfig(name="api", route="/api", traffic={"echo": 1.0})
    endpoints.apply(config, {"echo"})
    for key, value in [("routes", "t"), ("endpoint:api", config), ("replicas:echo", "s")]:
        longpoll.publish(key, value, value)
    longpoll.record_ack("p1", {k: longpoll.snapshot_id(k) for k in longpoll.keys()})
    goal_id = table.request(GoalKind.ENDPOINT_ACKED, "api", fingerprint(config), 0.0)
    table.evaluate(lambda g: judge(g, BackendState(), endpoints, longpoll, ["p1"], []), 0.0)
    assert table.result(goal_id).state == GoalState.PENDING
    table.evaluate(lambda g: judge(g, BackendState(), endpoints, longpoll, ["p1"], ["p1"]), 0.0)
    assert table.result(goal_id).state == GoalState.MET


def test_endpoint_goal_with_no_live_proxy_is_met_at_once():
    endpoints, table = EndpointState(), GoalTable()
    config = EndpointConfig(name="api", route="/api", traffic={"echo": 1.0})
    endpoints.apply(config, {"echo"})
    goal_id = table.request(GoalKind.ENDPOINT_ACKED, "api", fingerprint(config), 0.0)
    assert judged(goal_id, table, BackendState(), endpoints, LongPollHost()).state == GoalState.MET


def test_unjudged_goal_stays_pending():
    table = GoalTable()
    goal_id = table.request(GoalKind.BACKEND_DELETED, "x", "", 0.0)
    table.evaluate(lambda goal: PENDING, 1.0)
    assert table.result(goal_id).state == GoalState.PENDING


def test_request_matching_a_met_goal_that_no_longer_holds_is_judged_afresh():
    # The same backend config deleted and created again: the first creation's
    # success says nothing about the new replicas.
    table = GoalTable()
    first = table.request(GoalKind.BACKEND_READY, "echo", "fp", 0.0)
    table.evaluate(lambda goal: MET, 1.0)
    again = table.request(GoalKind.BACKEND_READY, "echo", "fp", 2.0, judge=lambda goal: PENDING)
    assert again != first and table.result(again).state == GoalState.PENDING
