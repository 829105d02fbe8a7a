"""Five-field cron expressions: parsing and matching a minute, nothing else.

`minute hour day-of-month month day-of-week`, each `*`, a number, a range
`a-b`, a list `a,b,c` and a step `*/n` or `a-b/n`; day-of-week is 0-6 with
Sunday 0 (7 is Sunday too). As in Vixie cron, when both day fields are
restricted a day matches if either does. Names (`mon`, `jan`) and the
`@daily` shorthands are not accepted: a sync window's schedule is short.

Written here rather than taken from a library: the matcher is about sixty
lines, and no cron library is among the project's dependencies (croniter,
the usual one, has been unmaintained since 2024). Pure: no clock, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

__all__ = ["CronError", "Cron", "parse_cron"]

# (name, lowest, highest) of each field, in order.
_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12), ("day of week", 0, 7))


class CronError(ValueError):
    """A schedule that is not a five-field cron expression; the message says which field."""


@dataclass(frozen=True)
class Cron:
    """A parsed schedule: the values each field allows."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool  # day of month was `*`
    any_weekday: bool  # day of week was `*`

    def matches(self, moment: datetime) -> bool:
        """Whether the schedule fires in the minute of `moment` (its own wall clock)."""
        return (
            moment.minute in self.minutes
            and moment.hour in self.hours
            and moment.month in self.months
            and self._day_matches(moment)
        )

    def last_start(self, moment: datetime, within: timedelta) -> datetime | None:
        """The latest minute at or before `moment`, and no more than `within`
        before it, at which the schedule fires; None when there is none.

        Walks back over hours first (a schedule fires only in its hours), so
        a window of a day costs at most 24 + 60 steps, a week ~ 170 + 60."""
        start = moment.replace(second=0, microsecond=0)
        earliest = moment - within
        hour = start.replace(minute=0)
        while hour + timedelta(minutes=59) >= earliest:
            if hour.hour in self.hours and hour.month in self.months and self._day_matches(hour):
                last_minute = start.minute if hour == start.replace(minute=0) else 59
                for minute in sorted((m for m in self.minutes if m <= last_minute), reverse=True):
                    candidate = hour.replace(minute=minute)
                    if candidate < earliest:
                        break
                    return candidate
            hour -= timedelta(hours=1)
        return None

    def next_start(self, moment: datetime, within: timedelta) -> datetime | None:
        """The first minute after `moment`, no more than `within` after it, at
        which the schedule fires; None when there is none."""
        start = moment.replace(second=0, microsecond=0) + timedelta(minutes=1)
        latest = moment + within
        hour = start.replace(minute=0)
        while hour <= latest:
            if hour.hour in self.hours and hour.month in self.months and self._day_matches(hour):
                first_minute = start.minute if hour == start.replace(minute=0) else 0
                for minute in sorted(m for m in self.minutes if m >= first_minute):
                    candidate = hour.replace(minute=minute)
                    return candidate if candidate <= latest else None
            hour += timedelta(hours=1)
        return None

    def _day_matches(self, moment: datetime) -> bool:
        day = moment.day in self.days
        weekday = (moment.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return day and weekday
        return day or weekday


def parse_cron(text: str) -> Cron:
    """Parse `text`; raises CronError naming the field that is wrong."""
    parts = text.split()
    if len(parts) != 5:
        raise CronError(f"a schedule has 5 fields (minute hour day-of-month month day-of-week), got {len(parts)}")
    values = [_field(part, *spec) for part, spec in zip(parts, _FIELDS)]
    weekdays = frozenset(day % 7 for day in values[4])
    return Cron(values[0], values[1], values[2], values[3], weekdays, parts[2] == "*", parts[4] == "*")


def _field(text: str, name: str, low: int, high: int) -> frozenset[int]:
    allowed: set[int] = set()
    for item in text.split(","):
        allowed |= _item(item, name, low, high)
    return frozenset(allowed)


def _item(item: str, name: str, low: int, high: int) -> set[int]:
    span, _, step_text = item.partition("/")
    step = _number(step_text, name) if step_text else 1
    if step < 1:
        raise CronError(f"{name}: a step must be at least 1 (got '{item}')")
    if span == "*":
        first, last = low, high
    elif "-" in span:
        first_text, _, last_text = span.partition("-")
        first, last = _number(first_text, name), _number(last_text, name)
    else:
        first = _number(span, name)
        last = high if step_text else first
    if not low <= first <= high or not low <= last <= high:
        raise CronError(f"{name}: '{item}' is outside {low}-{high}")
    if first > last:
        raise CronError(f"{name}: '{item}' is a range that runs backwards")
    return set(range(first, last + 1, step))


def _number(text: str, name: str) -> int:
    if not text.isdigit():
        raise CronError(f"{name}: '{text}' is not a number")
    return int(text)
