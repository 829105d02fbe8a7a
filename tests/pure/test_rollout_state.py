"""The controller's rollouts: what the proxies are served, how reports move steps, what survives a restart."""

from __future__ import annotations

from controller.state.rollout_state import RolloutState
from vocabulary.control.request_stats import LATENCY_BOUNDS_S, RequestStats
from vocabulary.control.rollouts import CheckName, RolloutPhase
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.rollout_config import RolloutConfig

ROLLOUT = RolloutConfig(steps=(0.5, 1.0), step_interval_s=10, min_requests=10, max_error_ratio=0.1)
OLD = {"v1": 1.0}
NEW = {"v1": 0.0, "v2": 1.0}


def config(traffic: dict[str, float]) -> EndpointConfig:
    return EndpointConfig(name="api", route="/api", traffic=traffic, rollout=ROLLOUT)


def report(requests: int, errors: int = 0) -> dict[str, object]:
    buckets = [0] * (len(LATENCY_BOUNDS_S) + 1)
    buckets[0] = requests
    return {"v2": RequestStats(requests=requests, errors=errors, buckets=tuple(buckets)).model_dump(mode="json")}


def rolling() -> RolloutState:
    state = RolloutState()
    state.on_endpoint(config(NEW), OLD, now=0.0)
    return state


def test_proxies_are_served_the_current_step_not_git_s_split() -> None:
    assert rolling().served(config(NEW)).traffic == {"v1": 0.5, "v2": 0.5}


def test_proxies_are_told_the_rollout_step_they_serve_and_none_once_it_is_promoted() -> None:
    state = rolling()
    assert state.served(config(NEW)).rollout_step == 1
    state.record("p1", report(20))
    assert state.tick(now=10.0) == ["api"]
    assert state.served(config(NEW)).rollout_step == 2
    state.record("p1", report(40))
    assert state.tick(now=20.0) == ["api"]  # promoted: the weights stay, the step goes
    assert state.served(config(NEW)).rollout_step == 0


def test_every_backend_of_git_s_split_stays_served_at_weight_zero_at_least() -> None:
    state = rolling()
    state.record("p1", report(20, errors=10))
    state.tick(now=1.0)
    assert set(state.served(config(NEW)).backends()) == {"v1", "v2"}


def test_an_endpoint_without_a_rollout_is_served_as_configured() -> None:
    plain = EndpointConfig(name="api", route="/api", traffic=NEW)
    assert RolloutState().served(plain) == plain


def test_proxy_reports_pass_steps_until_git_s_split_is_served() -> None:
    state = rolling()
    state.record("p1", report(20))
    assert state.tick(now=10.0) == ["api"]
    state.record("p1", report(40))
    state.tick(now=20.0)
    assert state.rollouts()["api"].phase is RolloutPhase.PROMOTED and state.served(config(NEW)).traffic == NEW


def test_a_failed_check_serves_the_old_split_again_and_is_counted() -> None:
    state = rolling()
    state.record("p1", report(20, errors=10))
    assert state.tick(now=1.0) == ["api"]
    assert state.served(config(NEW)).traffic == {"v1": 1.0, "v2": 0.0}
    counts = {(c.check, c.result): c.count for c in state.check_counts()}
    assert counts == {(CheckName.REQUESTS, "pass"): 1, (CheckName.ERROR_RATIO, "fail"): 1}


def test_a_rollout_in_progress_survives_a_restart_from_the_checkpoint() -> None:
    state = rolling()
    state.record("p1", report(20))
    state.tick(now=10.0)
    restored = RolloutState.from_json(state.to_json())
    assert restored.rollouts() == state.rollouts() and restored.check_counts() == state.check_counts()
    restored.record("p1", report(25))
    assert restored.tick(now=20.0) == []  # 5 new requests: the step holds


def test_a_deleted_endpoint_forgets_its_rollout() -> None:
    state = rolling()
    state.forget("api")
    assert state.rollouts() == {} and state.dirty


def test_an_abort_by_hand_is_served_at_once_and_survives_a_restart() -> None:
    state = rolling()
    assert state.decide("api", "abort", "otto") == "endpoint api: aborted by hand by otto at step 1/2, traffic back"
    assert state.dirty and state.served(config(NEW)).traffic == {"v1": 1.0, "v2": 0.0}
    again = RolloutState.from_json(state.to_json())
    assert again.rollouts()["api"].by_hand == "otto" and again.served(config(NEW)).traffic == {"v1": 1.0, "v2": 0.0}
    state.on_endpoint(config(NEW), {"v1": 1.0}, now=5.0)  # the same commit applied again: not retried
    assert state.rollouts()["api"].phase is RolloutPhase.ABORTED
