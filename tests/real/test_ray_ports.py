"""`gitops run --ray-port --ray-min-worker-port --ray-max-worker-port`: the embedded Ray listens
where it was told (its GCS on the port, every worker process in the range), and a taken port
is one line before anything starts (issue 49, row 10). It runs no log monitor: nothing reads
what one relays, and its globbing costs CPU that grows with every worker the session starts.
Its workers with a runtime environment start through controller.shell.setup_worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from controller.cluster import descendants
from controller.shell import setup_worker
from tests.support.process_ports import command_line, listening_ports
from tests.support.stack import eventually, free_port, free_port_range, occupied_port

pytestmark = pytest.mark.real


def _scaffold(root: Path) -> None:
    root.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    done = subprocess.run([sys.executable, "-m", "gitops", "init"], cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "hello"],
                   cwd=root, check=True)


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}


def test_the_embedded_ray_listens_on_the_ports_it_was_given(tmp_path: Path) -> None:
    repo = tmp_path / "specs"
    _scaffold(repo)
    gcs = free_port()
    low, high = free_port_range(64)
    proxy, admin, metrics = free_port(), free_port(), free_port()
    agent = subprocess.Popen(
        [sys.executable, "-m", "gitops", "run", "--proxy-port", str(proxy), "--admin-port", str(admin),
         "--proxy-metrics-port", str(metrics), "--interval", "1", "--namespace", f"ports-{gcs}",
         "--ray-port", str(gcs), "--ray-min-worker-port", str(low), "--ray-max-worker-port", str(high)],
        cwd=repo, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        def served() -> bool:
            assert agent.poll() is None, agent.communicate()[0]
            return httpx.get(f"http://127.0.0.1:{proxy}/hello", timeout=5).status_code == 200

        eventually(served, timeout_s=240, interval_s=0.5, what="/hello served", retry_on=(httpx.HTTPError,))
        ports = listening_ports(descendants(agent.pid))
        gcs_servers = [pid for pid in ports if "gcs_server" in command_line(pid)]
        assert len(gcs_servers) == 1 and gcs in ports[gcs_servers[0]], {p: command_line(p) for p in ports}
        # Worker processes are named `ray::NAME`; Ray's own per-node agents (`ray::DashboardAgent`,
        # `ray::RuntimeEnvAgent`) are not workers and keep ports of their own.
        workers = {pid: listened for pid, listened in ports.items()
                   if command_line(pid).startswith("ray::") and not command_line(pid).split()[0].endswith("Agent")}
        # The controller, the proxy and the hello replica at least, each on a port of the range.
        names = {command_line(pid) for pid in workers}
        assert any("Controller" in name for name in names) and len(workers) >= 3, names
        # Each holds its Ray port in the range; the proxy also serves the agent's own proxy ports.
        for pid, listened in workers.items():
            ray_ports = {port for port in listened if port not in (proxy, metrics)}
            assert ray_ports and all(low <= port <= high for port in ray_ports), (command_line(pid), listened)
        started = [command_line(pid) for pid in descendants(agent.pid)]
        raylets = [line for line in started if "raylet/raylet" in line]
        # Its workers with a runtime environment (the hello replica's working_dir, which served) start
        # through our setup script, which does not import Ray before the worker does.
        assert len(raylets) == 1 and f"{setup_worker.__file__} " in raylets[0], started
        assert not [line for line in started if "log_monitor" in line], started
    finally:
        agent.send_signal(signal.SIGTERM)
        out = agent.communicate(timeout=120)[0]
    assert agent.returncode == 0, out


def test_a_taken_ray_port_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    repo = tmp_path / "specs"
    _scaffold(repo)
    with occupied_port() as taken:
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "gitops", "run", "--proxy-port", str(free_port()), "--admin-port", str(free_port()),
             "--proxy-metrics-port", str(free_port()), "--ray-port", str(taken)],
            cwd=repo, env=_env(), capture_output=True, text=True, timeout=120,
        )
    assert done.returncode == 1 and done.stdout == "", done.stdout
    line = done.stderr.strip()
    assert line.startswith(f"gitops run: the embedded Ray cannot listen on port {taken}: in use by pid {os.getpid()}")
    assert line.endswith("(use --ray-port)") and "\n" not in line
    assert time.monotonic() - started < 30  # refused before Ray started
