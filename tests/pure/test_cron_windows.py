"""The cron matcher and sync windows: pure, the clock passed in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gitops.delivery.cron import CronError, parse_cron
from gitops.delivery.windows import SyncWindow, WindowKind, hold_at

UTC = UTC


@pytest.mark.parametrize(
    ("schedule", "moment", "fires"),
    [
        ("* * * * *", datetime(2026, 11, 26, 10, 7), True),
        ("0 22 * * 1-5", datetime(2026, 11, 26, 22, 0), True),  # a Thursday
        ("0 22 * * 1-5", datetime(2026, 11, 28, 22, 0), False),  # a Saturday
        ("*/15 9-17 * * *", datetime(2026, 11, 26, 9, 45), True),
        ("*/15 9-17 * * *", datetime(2026, 11, 26, 9, 40), False),
        ("5,10 0 1 1 *", datetime(2027, 1, 1, 0, 10), True),
        ("0 0 * * 0", datetime(2026, 11, 29, 0, 0), True),  # Sunday is 0
        ("0 0 * * 7", datetime(2026, 11, 29, 0, 0), True),  # and 7
        ("0 0 13 * 5", datetime(2026, 11, 13, 0, 0), True),  # both day fields: either matches
        ("0 0 13 * 5", datetime(2026, 11, 27, 0, 0), True),
        ("0 0 13 * 5", datetime(2026, 11, 26, 0, 0), False),
        ("10-20/5 * * * *", datetime(2026, 11, 26, 3, 15), True),
        ("10-20/5 * * * *", datetime(2026, 11, 26, 3, 25), False),
    ],
)
def test_a_schedule_fires_in_the_minutes_it_names(schedule: str, moment: datetime, fires: bool) -> None:
    assert parse_cron(schedule).matches(moment) is fires


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ("* * * *", "a schedule has 5 fields"),
        ("60 * * * *", "minute: '60' is outside 0-59"),
        ("* * * * mon", "day of week: 'mon' is not a number"),
        ("5-1 * * * *", "minute: '5-1' is a range that runs backwards"),
        ("*/0 * * * *", "minute: a step must be at least 1"),
    ],
)
def test_a_bad_schedule_says_which_field_is_wrong(schedule: str, message: str) -> None:
    with pytest.raises(CronError, match=message):
        parse_cron(schedule)


def window(kind: WindowKind, schedule: str, duration_s: float, zone: str = "UTC") -> SyncWindow:
    return SyncWindow(kind, schedule, parse_cron(schedule), duration_s, zone)


def test_a_deny_window_holds_until_its_end_in_its_time_zone() -> None:
    nightly = window(WindowKind.DENY, "0 22 * * 1-5", 36000, "Europe/Berlin")
    # Thursday 26 Nov 2026, 23:30 in Berlin (UTC+1) is 22:30 UTC: open since 21:00 UTC, until 07:00 UTC.
    hold = hold_at((nightly,), datetime(2026, 11, 26, 22, 30, tzinfo=UTC))
    assert hold is not None and hold.reason == "SyncWindow"
    assert hold.until == datetime(2026, 11, 27, 7, 0, tzinfo=UTC)
    assert "until 2026-11-27T07:00:00Z" in hold.message
    # 20:59 UTC is 21:59 in Berlin: not open yet; 07:00 UTC: closed again.
    assert hold_at((nightly,), datetime(2026, 11, 26, 20, 59, tzinfo=UTC)) is None
    assert hold_at((nightly,), datetime(2026, 11, 27, 7, 0, tzinfo=UTC)) is None


def test_the_time_zone_follows_daylight_saving() -> None:
    nightly = window(WindowKind.DENY, "0 22 * * *", 3600, "Europe/Berlin")
    # In July Berlin is UTC+2: the window opens at 20:00 UTC.
    assert hold_at((nightly,), datetime(2026, 7, 1, 20, 30, tzinfo=UTC)) is not None
    assert hold_at((nightly,), datetime(2026, 7, 1, 21, 30, tzinfo=UTC)) is None


def test_with_allow_windows_only_their_time_applies() -> None:
    office = window(WindowKind.ALLOW, "0 9 * * 1-5", 8 * 3600)
    assert hold_at((office,), datetime(2026, 11, 26, 10, 0, tzinfo=UTC)) is None
    hold = hold_at((office,), datetime(2026, 11, 28, 10, 0, tzinfo=UTC))  # Saturday
    assert hold is not None and hold.until == datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    assert "next allow window opens at 2026-11-30T09:00:00Z" in hold.message


def test_no_window_means_no_hold() -> None:
    assert hold_at((), datetime(2026, 11, 26, tzinfo=UTC)) is None


def test_a_deny_window_wins_over_an_open_allow_window() -> None:
    always = window(WindowKind.ALLOW, "0 0 * * *", 86400)
    freeze = window(WindowKind.DENY, "0 12 * * *", 600)
    hold = hold_at((always, freeze), datetime(2026, 11, 26, 12, 5, tzinfo=UTC))
    assert hold is not None and hold.until == datetime(2026, 11, 26, 12, 10, tzinfo=UTC)


def test_a_window_longer_than_a_day_is_found_from_its_start() -> None:
    weekend = window(WindowKind.DENY, "0 18 * * 5", 2.5 * 86400)
    hold = hold_at((weekend,), datetime(2026, 11, 29, 12, 0, tzinfo=UTC) + timedelta(hours=1))
    assert hold is not None and hold.until == datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
