"""docs/tutorial.md works as written, on the installed wheel.

Its blocks marked `<!-- tutorial -->` run in order in one shell session's
directory (each block in a fresh bash that starts where the last one
ended); the block marked `<!-- tutorial: background -->` is the agent,
started as a second terminal would. Before each block after it, the test
waits until the agent has applied the repository's HEAD, as a reader
would before looking. Only the ports (free ones, not 8000/8001) and the
Ray (the test session's) differ from the page, through a `gitops` and a
`curl` shell function.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import ray

from docgen import ROOT
from tests.support.install import Installed
from tests.support.stack import _shutdown_controller, eventually, free_port

pytestmark = pytest.mark.real

_BLOCK = re.compile(r"<!-- tutorial(?P<background>: background)? -->\n```sh\n(?P<body>.*?)```", re.DOTALL)


@dataclass(frozen=True)
class Block:
    body: str
    background: bool


def tutorial_blocks() -> list[Block]:
    text = (ROOT / "docs" / "tutorial.md").read_text()
    return [Block(m["body"], bool(m["background"])) for m in _BLOCK.finditer(text)]


def preamble(installed: Installed, proxy: int, admin: int, metrics: int, ray_address: str) -> str:
    gitops = installed.bin / "gitops"
    return f"""set -euo pipefail
gitops() {{
  case "$1" in
    run) exec {gitops} "$@" --proxy-port {proxy} --admin-port {admin} --proxy-metrics-port {metrics} \\
           --interval 1 --ray-address {ray_address} ;;
    status|history|sync|suspend|resume) {gitops} "$@" --agent http://127.0.0.1:{admin} ;;
    *) {gitops} "$@" ;;
  esac
}}
curl() {{ command curl "${{@//localhost:8000/127.0.0.1:{proxy}}}"; }}
"""


def test_the_tutorial_has_runnable_blocks_and_one_agent() -> None:
    blocks = tutorial_blocks()
    assert len(blocks) >= 6 and [b.background for b in blocks].count(True) == 1


def test_the_tutorial_runs_as_written(installed: Installed, tmp_path: Path, ray_session: str) -> None:
    proxy, admin, metrics = free_port(), free_port(), free_port()
    head = preamble(installed, proxy, admin, metrics, ray.get_runtime_context().gcs_address)
    home, where = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    where.write_text(str(home))
    env = {**installed.env(), "GIT_AUTHOR_NAME": "Reader", "GIT_AUTHOR_EMAIL": "reader@example.invalid",
           "GIT_COMMITTER_NAME": "Reader", "GIT_COMMITTER_EMAIL": "reader@example.invalid", "HOME": str(home)}
    agent: subprocess.Popen[str] | None = None
    log = tmp_path / "agent.log"
    took: list[tuple[str, float]] = []  # each block's commit -> applied, for the record
    previous = ""
    try:
        for block in tutorial_blocks():
            script = f'{head}cd "$(cat {where})"\n{block.body}'
            if block.background:
                agent = subprocess.Popen(["bash", "-c", script], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
                continue
            if agent is not None:
                took.append((previous, wait_applied(agent, admin, Path(where.read_text().strip()), log)))
            previous = block.body.strip().splitlines()[-1]
            done = subprocess.run(
                ["bash", "-c", f"{script}\npwd > {where}\n"], env=env, capture_output=True, text=True, timeout=300
            )
            assert done.returncode == 0, f"{block.body}\n{done.stdout}\n{done.stderr}"
            assert "Traceback" not in done.stdout + done.stderr, done.stderr
        assert agent is not None
        print("block's last line -> its commit applied, s:", [(line, round(s, 2)) for line, s in took])
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=120) == 0, log.read_text()
        assert "Traceback" not in log.read_text()
    finally:
        if agent is not None and agent.poll() is None:
            agent.kill()
            agent.wait(timeout=60)
        _shutdown_controller()


def wait_applied(agent: subprocess.Popen[str], admin: int, repo: Path, log: Path) -> float:
    """Wait until the agent applied HEAD; returns the seconds it took."""
    start = time.monotonic()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()

    def applied() -> bool:
        assert agent.poll() is None, log.read_text()
        status = httpx.get(f"http://127.0.0.1:{admin}/status", timeout=5).json()
        return status["status"] == "Synced" and status["last_applied_revision"] == head

    eventually(applied, timeout_s=240, interval_s=0.1, what=f"the agent applied {head[:7]}", retry_on=(httpx.HTTPError,))
    return time.monotonic() - start
