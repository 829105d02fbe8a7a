"""Who owns an autoscaled backend's replica count, as BackendState applies configs (issue #7).

Git owns the bounds; the autoscaler owns the count within them. Re-applying
or changing bounds keeps the count (clamped); turning autoscaling off hands
the count back to `num_replicas`.
"""

from __future__ import annotations

from controller.state.backend_state import BackendState
from vocabulary.spec.backends import AutoscalingConfig, BackendConfig


def backend(autoscaling: AutoscalingConfig | None = None, num_replicas: int = 1, **fields) -> BackendConfig:
    return BackendConfig(name="api", version="v1", import_path="apps.api:api",
                         num_replicas=num_replicas, autoscaling=autoscaling, **fields)


def bounds(low: int, high: int) -> AutoscalingConfig:
    return AutoscalingConfig(min_replicas=low, max_replicas=high, target_ongoing_requests=2)


def scaled_to(count: int, config: BackendConfig) -> BackendState:
    state = BackendState()
    state.apply(config)
    state.set_target("api", count)
    return state


def test_a_new_autoscaled_backend_starts_at_min_replicas():
    state = BackendState()
    state.apply(backend(bounds(2, 8)))
    assert state.target("api") == 2


def test_reapplying_an_autoscaled_backend_keeps_the_autoscaled_count():
    state = scaled_to(5, backend(bounds(1, 8)))
    state.apply(backend(bounds(1, 8), user_config={"changed": True}))
    assert state.target("api") == 5


def test_narrower_bounds_clamp_the_autoscaled_count_at_once():
    state = scaled_to(5, backend(bounds(1, 8)))
    state.apply(backend(bounds(1, 3)))
    assert state.target("api") == 3


def test_turning_autoscaling_off_hands_the_count_back_to_num_replicas():
    state = scaled_to(5, backend(bounds(1, 8)))
    state.apply(backend(None, num_replicas=1))
    assert state.target("api") == 1
