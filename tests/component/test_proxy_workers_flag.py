"""`gitops run --proxy-workers N` and `--proxy-max-connections N`: out of range is a one-line usage error
before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitops.cli import main


@pytest.mark.parametrize("workers", ["-1", "33"])
def test_run_refuses_proxy_workers_out_of_range_before_starting_anything(
    workers: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state_dir = tmp_path / "state"
    assert main(["run", "--proxy-workers", workers, "--state-dir", str(state_dir)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"gitops run: --proxy-workers must be 1 to 32 (or 0: the node's CPUs, at most 4), not {workers}")
    assert not state_dir.exists()


@pytest.mark.parametrize("connections", ["0", "1000001"])
def test_run_refuses_proxy_max_connections_out_of_range_before_starting_anything(
    connections: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state_dir = tmp_path / "state"
    assert main(["run", "--proxy-max-connections", connections, "--state-dir", str(state_dir)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"gitops run: --proxy-max-connections must be 1 to 1000000, not {connections}")
    assert not state_dir.exists()
