"""Headless Chromium for the status page's real tests: Debian's chromium and chromedriver,
started with the flags this machine's closed network needs, in a profile of the test's own."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

__all__ = ["CHROMIUM", "CHROMEDRIVER", "headless_chromium"]

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@contextmanager
def headless_chromium(profile: Path, height: int = 1400, browser_log: bool = False) -> Iterator[webdriver.Chrome]:
    """A headless Chromium with its profile in `profile`, 1200 × `height`; `browser_log`: the page's
    console kept for `driver.get_log("browser")`. Quit when the block ends."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--no-first-run", f"--user-data-dir={profile}", f"--window-size=1200,{height}",
    ]:
        options.add_argument(flag)
    if browser_log:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
