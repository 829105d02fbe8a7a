"""The retry delay after transient failures: doubling from a base, capped."""

from __future__ import annotations

from gitops.sources.watching import backoff


def test_the_first_retry_waits_the_base_delay() -> None:
    assert backoff(1, base_s=1.0, cap_s=30.0) == 1.0


def test_each_further_failure_doubles_the_delay() -> None:
    assert [backoff(n, base_s=1.0, cap_s=30.0) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]


def test_the_delay_never_exceeds_the_cap() -> None:
    assert backoff(20, base_s=1.0, cap_s=30.0) == 30.0
