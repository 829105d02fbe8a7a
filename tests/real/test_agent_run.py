"""`gitops run` as users start it: from a fresh clone, serving the examples,
quiet on the console, and gone without a trace on SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.real

REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def descendants(pid: int) -> set[int]:
    """Every process below `pid`, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    target = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(target)], check=True)
    return target


def test_run_from_a_fresh_clone_serves_the_examples_and_stops_cleanly(clone: Path) -> None:
    proxy, admin = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    agent = subprocess.Popen(
        [sys.executable, "-m", "gitops", "run", "--proxy-port", str(proxy), "--admin-port", str(admin),
         "--proxy-metrics-port", str(free_port())],
        cwd=clone, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            assert agent.poll() is None, agent.communicate()
            try:
                if httpx.get(f"http://127.0.0.1:{proxy}/echo", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the example /echo never answered"
            time.sleep(0.5)
        status = httpx.get(f"http://127.0.0.1:{admin}/status", timeout=5).json()
        assert status["branch"] == "main" and status["path"] == "deployments"
        processes = descendants(agent.pid)
        assert processes, "an embedded Ray runs below the agent"
    finally:
        agent.send_signal(signal.SIGTERM)
        out, err = agent.communicate(timeout=120)
    assert agent.returncode == 0
    lines = out.splitlines()
    assert any(re.match(r"\d\d:\d\d:\d\d [0-9a-f]{7} applied in \d+\.\d\ds", line) for line in lines), out
    assert re.fullmatch(r"\d\d:\d\d:\d\d gitops: stopped", lines[-1]), out
    assert "Traceback" not in out + err and "WARN" not in out + err, err
    deadline = time.monotonic() + 20
    while any(alive(pid) for pid in processes):
        assert time.monotonic() < deadline, f"left running: {[p for p in processes if alive(p)]}"
        time.sleep(0.2)


def test_run_with_a_taken_admin_port_is_a_one_line_error(clone: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "gitops", "run", "--admin-port", str(taken.getsockname()[1])],
            cwd=clone, capture_output=True, text=True, timeout=60,
        )
    finally:
        taken.close()
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "admin address 127.0.0.1:" in done.stderr


def test_run_outside_a_git_repository_is_a_one_line_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gitops", "run", "--repo", str(tmp_path / "nothing")],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == f"gitops run: {tmp_path / 'nothing'}: not a git repository"
