"""The shipped alert rules and scrape config load in the real promtool."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.real

MONITORING = Path(__file__).resolve().parents[2] / "monitoring"
PROMTOOL = "/usr/bin/promtool"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    # No fallback and no skip: `make test` installs promtool, so a missing
    # binary is a broken environment and must fail the run.
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60, cwd=MONITORING)


def test_alert_rules_pass_promtool_check_rules() -> None:
    done = promtool("check", "rules", "alerts.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_scrape_config_passes_promtool_check_config() -> None:
    done = promtool("check", "config", "prometheus.yml")
    assert done.returncode == 0, done.stdout + done.stderr
