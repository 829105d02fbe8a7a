"""`gitops run` as users start it: from a fresh clone, serving the examples,
quiet on the console, and gone without a trace on SIGTERM."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterable

import httpx
import pytest
import ray

from controller.cluster import descendants
from tests.support.stack import AgentProcess, free_port, occupied_port

pytestmark = pytest.mark.real

REPO_ROOT = Path(__file__).resolve().parents[2]


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


@pytest.mark.smoke
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
                status = httpx.get(f"http://127.0.0.1:{admin}/status", timeout=5).json()
                # The whole example tree applied (not only /echo, which can answer first).
                if status["last_applied_revision"] is not None:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the example tree was never applied"
            time.sleep(0.5)
        assert httpx.get(f"http://127.0.0.1:{proxy}/echo", timeout=5).status_code == 200
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
        assert time.monotonic() < deadline, f"left running: {_commands(p for p in processes if alive(p))}"
        time.sleep(0.2)


def test_run_with_a_taken_admin_port_is_a_one_line_error(clone: Path) -> None:
    with occupied_port() as port:
        done = subprocess.run(
            [sys.executable, "-m", "gitops", "run", "--admin-port", str(port)],
            cwd=clone, capture_output=True, text=True, timeout=60,
        )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "admin address 127.0.0.1:" in done.stderr


def test_run_with_a_taken_proxy_port_is_a_one_line_error_naming_who_holds_it(clone: Path) -> None:
    """The proxy cannot listen: exit 1 within seconds with one line naming the
    address and the process holding it, nothing applied, no Ray traceback."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import socket, sys, time\n"
         "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
         "print(s.getsockname()[1], flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None
        port = int(holder.stdout.readline())
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        start = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "gitops", "run", "--proxy-port", str(port), "--admin-port", str(free_port()),
             "--proxy-metrics-port", str(free_port())],
            cwd=clone, env=env, capture_output=True, text=True, timeout=180,
        )
        took = time.monotonic() - start
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"gitops run: proxy cannot listen on 127.0.0.1:{port}: in use by pid {holder.pid} ("), (
        done.stderr
    )
    assert "Traceback" not in done.stdout + done.stderr and "applied" not in done.stdout, done.stdout
    print(f"gitops run stopped {took:.1f}s after it started (Ray's start included)")


def test_a_joined_agent_whose_proxy_cannot_start_stops_with_the_controllers_word(
    repo, tmp_path: Path, ray_session: str
) -> None:
    """Joined to a cluster, a port held by what may be this namespace's own proxy
    (a Ray proxy process) is left to the controller: its proxy's failure to
    start still ends `gitops run` with one line, before anything is applied."""
    repo.write("deployments/empty.toml", "")
    repo.commit("nothing yet")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import socket, sys, time\n"
         "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
         "print(s.getsockname()[1], flush=True); time.sleep(600)", "ray::ProxyActor"],
        stdout=subprocess.PIPE, text=True,
    )
    agent = None
    try:
        assert holder.stdout is not None
        port = int(holder.stdout.readline())
        start = time.monotonic()
        agent = AgentProcess(repo.root, tmp_path, ray.get_runtime_context().gcs_address,
                             extra_args=["--proxy-port", str(port)])
        code = agent.process.wait(timeout=120)
        took = time.monotonic() - start
        log = agent.log_path.read_text()
    finally:
        holder.kill()
        holder.wait()
        if agent is not None:
            agent.stop()
    assert code == 1, log
    assert f"gitops run: proxy cannot listen on 127.0.0.1:{port}: in use by pid {holder.pid} (" in log, log
    assert "Traceback" not in log and "applied" not in log, log
    print(f"stopped {took:.1f}s after it started")


def test_run_outside_a_git_repository_is_a_one_line_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gitops", "run", "--repo", str(tmp_path / "nothing")],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == f"gitops run: {tmp_path / 'nothing'}: not a git repository"


APP = '''
import time


class Echo:
    def __init__(self, start_delay_s):
        time.sleep(start_delay_s)

    def __call__(self, request):
        return "echo"
'''


def echo_repo(repo, start_delay_s: float) -> str:
    """A repository serving one backend whose replica takes `start_delay_s` to start."""
    repo.write("deployments/__init__.py", "")
    repo.write("deployments/apps/__init__.py", "")
    repo.write("deployments/apps/echo.py", APP)
    repo.write(
        "deployments/echo.toml",
        '[backends.echo-v1]\nimport_path = "deployments.apps.echo:Echo"\n'
        f"init_args = [{start_delay_s}]\nray_actor_options = {{ num_cpus = 0.01 }}\n"
        'graceful_shutdown_timeout_s = 1\n\n[endpoints.echo]\nroute = "/echo"\ntraffic = { "echo-v1" = 1.0 }\n',
    )
    return repo.commit("echo")


class RunningCommand:
    """`gitops run` on a repository, its stdout lines collected as they come."""

    def __init__(self, repo_root: Path, state_dir: Path, *flags: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gitops", "run", "--repo", str(repo_root), "--state-dir", str(state_dir),
             "--proxy-port", str(free_port()), "--admin-port", str(free_port()), *flags],
            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for_line(self, matches: Callable[[str], bool], timeout_s: float = 180) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            found = next((line for line in self.lines if matches(line)), None)
            if found is not None:
                return found
            assert self.process.poll() is None, (self.lines, self.process.stderr.read())
            assert time.monotonic() < deadline, f"no such line within {timeout_s} s: {self.lines}"
            time.sleep(0.2)

    def terminate(self, timeout_s: float = 120) -> tuple[str, float]:
        """SIGTERM; returns stderr and how long the process took to exit."""
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout_s)
        finally:
            if self.process.poll() is None:
                self.process.kill()
        took = time.monotonic() - started
        self._reader.join(10)
        return self.process.stderr.read(), took


def _commands(pids: Iterable[int]) -> list[str]:
    found = []
    for pid in pids:
        try:
            found.append(f"{pid} " + (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:120])
        except OSError:
            continue
    return found


def wait_gone(processes: set[int], timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while any(alive(pid) for pid in processes):
        assert time.monotonic() < deadline, f"left running: {_commands(p for p in processes if alive(p))}"
        time.sleep(0.2)


def test_run_with_json_logs_writes_one_json_object_per_line_with_reconcile_fields(repo, tmp_path: Path) -> None:
    head = echo_repo(repo, start_delay_s=0.0)
    run = RunningCommand(repo.root, tmp_path / "state", "--log-format", "json")
    try:
        run.wait_for_line(lambda line: '"result": "applied"' in line)
        processes = descendants(run.process.pid)
    finally:
        err, _ = run.terminate()
    assert run.process.returncode == 0 and "Traceback" not in err, err
    events = [json.loads(line) for line in run.lines]
    reconcile = next(e for e in events if e.get("result") == "applied")
    assert reconcile["commit"] == head[:7] and reconcile["backend"] == "echo-v1"
    assert isinstance(reconcile["duration_s"], float) and reconcile["duration_s"] > 0
    assert events[-1]["msg"] == "gitops: stopped"
    wait_gone(processes)


def test_sigterm_while_an_apply_waits_for_a_slow_replica_stops_cleanly_within_seconds(
    repo, tmp_path: Path
) -> None:
    echo_repo(repo, start_delay_s=120.0)
    run = RunningCommand(repo.root, tmp_path / "state")
    try:
        run.wait_for_line(lambda line: "… waiting for create backend echo-v1" in line)
        processes = descendants(run.process.pid)
        time.sleep(1)  # the replica is inside its slow constructor, the apply in its goal wait
    finally:
        err, took = run.terminate()
    assert run.process.returncode == 0, (run.lines, err)
    assert "Traceback" not in "\n".join(run.lines) + err, err
    assert re.fullmatch(r"\d\d:\d\d:\d\d gitops: stopped", run.lines[-1]), run.lines
    assert took < 20, f"took {took:.1f} s to stop"
    wait_gone(processes)


def _named(pids: set[int], name: str) -> list[int]:
    found = []
    for pid in pids:
        try:
            if (Path("/proc") / str(pid) / "comm").read_text().strip() == name:
                found.append(pid)
        except OSError:
            continue
    return found


def test_an_agent_whose_embedded_ray_dies_says_so_once_and_exits_for_its_supervisor(clone: Path) -> None:
    admin = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    agent = subprocess.Popen(
        [sys.executable, "-m", "gitops", "run", "--proxy-port", str(free_port()), "--admin-port", str(admin),
         "--proxy-metrics-port", str(free_port())],
        cwd=clone, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            assert agent.poll() is None, agent.communicate()
            try:
                if httpx.get(f"http://127.0.0.1:{admin}/status", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the agent never answered /status"
            time.sleep(0.5)
        processes = descendants(agent.pid)
        [gcs] = _named(processes, "gcs_server")
        os.kill(gcs, signal.SIGKILL)
        out, err = agent.communicate(timeout=60)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.communicate()
    assert agent.returncode == 75, out + err
    said = [line for line in (out + err).splitlines() if "the Ray this agent started" in line]
    assert len(said) == 1 and "Traceback" not in out + err, out + err
    wait_gone(processes)
