"""The retry policy and budget (`proxy.pool.retrying`) and the `[retries]` table's rules."""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from proxy.pool.retrying import DEFAULT_POLICY, Outcome, RetryBudget, RetryPolicy, WINDOW_S
from vocabulary.spec.traffic_policy import RetriesConfig


def test_without_a_table_a_get_whose_replica_died_or_stalled_is_tried_once_more_and_a_post_never() -> None:
    policy = RetryPolicy.from_config(None)
    assert policy is DEFAULT_POLICY
    assert policy.tries("GET") == 2 and policy.tries("POST") == 1
    assert policy.outcomes == {Outcome.REPLICA_DIED, Outcome.REPLICA_STALLED}
    assert not policy.statuses and policy.budget_percent is None


def test_a_table_names_its_outcomes_status_codes_and_methods() -> None:
    policy = RetryPolicy.from_config(RetriesConfig(attempts=3, retry_on=("replica-died", "500", "503")))
    assert policy.outcomes == {Outcome.REPLICA_DIED}
    assert policy.statuses == {500, 503}
    assert policy.tries("PUT") == 3 and policy.tries("POST") == 1


@pytest.mark.parametrize("keys, message", [
    ({"methods": ("GET", "POST")}, "POST, which is not idempotent"),
    ({"retry_on": ("404",)}, "not an outcome to retry"),
    ({"retry_on": ("connect",)}, "not an outcome to retry"),
    ({"retry_on": ()}, "at least one outcome"),
    ({"backoff_s": 1.0, "max_backoff_s": 0.5}, "max_backoff_s must be at least backoff_s"),
    ({"attempts": 6}, "less than or equal to 5"),
])
def test_a_table_that_would_retry_what_it_should_not_is_refused(keys: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        RetriesConfig(**keys)  # type: ignore[arg-type]


def test_a_post_is_retried_when_the_endpoint_says_its_handler_tolerates_it() -> None:
    policy = RetryPolicy.from_config(RetriesConfig(methods=("POST",), non_idempotent=True))
    assert policy.tries("POST") == 2 and policy.tries("GET") == 1


def test_the_backoff_is_jittered_below_a_doubling_ceiling() -> None:
    policy = RetryPolicy.from_config(RetriesConfig(backoff_s=0.1, max_backoff_s=0.3))
    rng = random.Random(1)
    for retry, ceiling in [(1, 0.1), (2, 0.2), (3, 0.3), (4, 0.3)]:
        waits = [policy.backoff(retry, rng) for _ in range(200)]
        assert all(0 <= wait < ceiling for wait in waits)
        assert max(waits) > ceiling * 0.8 and min(waits) < ceiling * 0.2  # drawn across the range


def test_the_budget_allows_retries_up_to_its_share_of_the_requests() -> None:
    budget = RetryBudget()
    sent = 0
    for n in range(1000):
        now = n * 0.005  # 1000 requests over 5 s: all in one window
        budget.requested(now)
        if budget.allows(now, 20, 3):
            budget.retried(now)
            sent += 1
    requests, retries = budget.counts(5.0)
    assert requests == 1000 and retries == sent
    assert 190 <= sent <= 200


def test_the_budget_keeps_its_minimum_for_a_quiet_endpoint() -> None:
    budget = RetryBudget()
    budget.requested(0.0)
    allowed = 0
    for _ in range(5):
        if budget.allows(0.0, 20, 3):
            budget.retried(0.0)
            allowed += 1
    assert allowed == 3


def test_the_budget_forgets_what_left_its_window() -> None:
    budget = RetryBudget()
    for _ in range(10):
        budget.requested(100.0)
        budget.retried(100.0)
    assert not budget.allows(100.5, 20, 0)
    assert budget.counts(100.0 + WINDOW_S + 1) == (0, 0)
    budget.requested(100.0 + WINDOW_S + 1)
    assert budget.counts(100.0 + WINDOW_S + 1) == (1, 0)
