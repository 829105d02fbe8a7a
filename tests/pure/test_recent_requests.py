"""The last minute's requests per backend, from growing totals sampled a few seconds apart."""

from __future__ import annotations

from controller.policies.recent_requests import RecentRequests
from vocabulary.control.request_stats import RequestStats


def totals(requests: int, errors: int = 0) -> dict[str, RequestStats]:
    return {"echo": RequestStats(requests=requests, errors=errors)}


def test_the_last_minute_is_the_totals_less_the_oldest_sample_within_it() -> None:
    recent = RecentRequests(window_s=60.0, sample_every_s=2.0)
    for second in range(0, 120, 2):
        recent.sample(totals(second * 10), float(second))
    window_s, counted = recent.last_minute(totals(1200), 120.0)
    assert 60.0 <= window_s <= 62.0
    assert counted["echo"].requests == int(window_s * 10)


def test_just_after_start_the_window_is_what_was_seen() -> None:
    recent = RecentRequests()
    assert recent.last_minute(totals(5), 0.0) == (0.0, {})
    recent.sample(totals(5), 0.0)
    window_s, counted = recent.last_minute(totals(25), 4.0)
    assert (window_s, counted["echo"].requests) == (4.0, 20)


def test_a_sample_names_the_backends_whose_5xx_grew_once() -> None:
    recent = RecentRequests(sample_every_s=2.0)
    assert recent.sample(totals(10, 0), 0.0) == []
    assert recent.sample(totals(20, 3), 1.0) == []  # too soon for a sample
    assert recent.sample(totals(20, 3), 2.0) == ["echo"]
    assert recent.sample(totals(30, 3), 4.0) == []


def test_a_backend_at_a_new_version_is_counted_from_then_until_the_window_passes_it() -> None:
    recent = RecentRequests(window_s=60.0, sample_every_s=2.0)
    recent.sample(totals(0), 0.0)
    recent.sample(totals(100, 40), 10.0)
    recent.new_version("echo", totals(110, 50), 11.0)  # seen between samples: counted from then
    window_s, counted = recent.last_minute(totals(130, 50), 20.0)
    assert (window_s, counted["echo"].requests, counted["echo"].errors) == (20.0, 20, 0)
    assert recent.shorter_windows(20.0) == {"echo": 9.0}
    for second in range(12, 80, 2):  # the common window moves past the version change
        recent.sample(totals(130 + second, 50), float(second))
    assert recent.shorter_windows(80.0) == {}
    assert recent.last_minute(totals(210, 50), 80.0)[1]["echo"].errors == 0
