"""Restarting an agent that lost Ray: backoff doubles from 0.5 s and is capped at 10 s."""

from __future__ import annotations

from gitops.process.supervising import restart_delay_s


def test_restart_backoff_doubles_from_half_a_second() -> None:
    assert [restart_delay_s(n) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 4.0]


def test_restart_backoff_is_capped_at_ten_seconds() -> None:
    assert restart_delay_s(30) == 10.0
