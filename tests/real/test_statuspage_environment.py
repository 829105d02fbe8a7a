"""The status page's environment section in a real headless Chromium: branch, a hold, the promotion's gates."""

from __future__ import annotations

import pytest

from tests.real.test_statuspage import STATUS, browser, fixture_agent, text, wait_loaded  # noqa: F401 — fixtures
from tests.support.status_environment import ENVIRONMENT

pytestmark = pytest.mark.real


@pytest.fixture
def served_status() -> dict:
    return {**STATUS, "status": "Held", "environment": ENVIRONMENT}


def test_status_page_shows_the_environment_its_hold_and_its_promotion(fixture_agent: str, browser) -> None:  # noqa: F811
    browser.get(fixture_agent)
    wait_loaded(browser)
    assert text(browser, "status") == "Held"
    shown = text(browser, "environment").splitlines()
    assert shown[0] == "staging · branch env/staging"
    assert shown[1].startswith("held by a sync window: ffffffffffff · until 2026-11-27T07:00:00Z · deny window")
    assert shown[2].startswith("promotion to prod (env/prod, push): Soaking 0123456789ab · soaked 12.5s of 900s")
    assert "no_backend_errors: passed · 0 of 40 answers were 5xx" in shown[4]
