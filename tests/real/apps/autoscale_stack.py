"""`gitops run` against a tmp git repository, plus a loopback load generator.

For the autoscaling real test and benchmark: the agent runs as a user
starts it, joined to an existing Ray (the test session's), and everything
it started is stopped again. `Load` is a closed-loop client: N workers,
each sending its next request when the previous one answered, recording
each status and latency with the time it was sent.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import httpx

from controller.api import CONTROLLER_NAME, DEFAULT_NAMESPACE

__all__ = ["AgentProcess", "Load", "Answer", "free_port", "controller_status", "APP_SOURCE"]

APP_SOURCE = (Path(__file__).parent / "autoscale_slow.py").read_text()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def controller_status() -> dict[str, Any]:
    import ray

    handle = ray.get_actor(CONTROLLER_NAME, namespace=DEFAULT_NAMESPACE)
    return ray.get(handle.get_status.remote(), timeout=30)


class AgentProcess:
    """`gitops run --ray-address <address>` on loopback ports, short intervals."""

    def __init__(self, repo: Path, workdir: Path, ray_address: str) -> None:
        self.admin_port, self.proxy_port = free_port(), free_port()
        self.admin = f"http://127.0.0.1:{self.admin_port}"
        self.proxy = f"http://127.0.0.1:{self.proxy_port}"
        self.log_path = workdir / "agent.log"
        self._log = self.log_path.open("w")
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "gitops", "run",
                "--repo", str(repo), "--path", "deployments",
                "--ray-address", ray_address,
                "--proxy-port", str(self.proxy_port),
                "--proxy-metrics-port", str(free_port()),
                "--admin-port", str(self.admin_port),
                "--interval", "0.5", "--resync-interval", "2",
                "--state-dir", str(workdir / "state"),
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.http = httpx.Client(timeout=10)

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text().splitlines()[-lines:])

    def get(self, path: str) -> Any:
        return self.http.get(self.admin + path).json()

    def metrics(self) -> str:
        return self.http.get(self.admin + "/metrics").text

    def wait(self, what: str, done: Callable[[], bool], timeout_s: float = 90) -> float:
        """Poll `done` until true; returns the seconds it took."""
        start = time.monotonic()
        while True:
            assert self.process.poll() is None, f"gitops run exited:\n{self.log_tail()}"
            try:
                if done():
                    return time.monotonic() - start
            except (httpx.TransportError, ValueError, KeyError):
                pass
            assert time.monotonic() - start < timeout_s, f"timed out waiting for {what}:\n{self.log_tail()}"
            time.sleep(0.1)

    def wait_applied(self, commit: str) -> None:
        self.wait(
            f"{commit[:7]} applied",
            lambda: (s := self.get("/status"))["last_applied_revision"] == commit and s["status"] == "Synced",
        )

    def stop(self) -> None:
        self.http.close()
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self._log.close()
        _shutdown_controller()


def _shutdown_controller() -> None:
    """A joined cluster keeps serving after the agent stops: stop what it ran."""
    import ray

    from controller.client import ControllerClient

    try:
        handle = ray.get_actor(CONTROLLER_NAME, namespace=DEFAULT_NAMESPACE)
    except ValueError:
        return
    ControllerClient(handle, DEFAULT_NAMESPACE).shutdown()


@dataclass(frozen=True)
class Answer:
    sent_at: float  # time.monotonic()
    latency_s: float
    status: int  # 0: no HTTP answer at all


class Load:
    """A closed-loop load of `workers` concurrent clients against one URL."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._answers: list[Answer] = []
        self._lock = threading.Lock()
        self._workers: list[tuple[threading.Thread, threading.Event]] = []

    def set_workers(self, count: int) -> None:
        while len(self._workers) < count:
            stop = threading.Event()
            thread = threading.Thread(target=self._work, args=(stop,), daemon=True)
            thread.start()
            self._workers.append((thread, stop))
        while len(self._workers) > count:
            thread, stop = self._workers.pop()
            stop.set()
            thread.join(15)

    def stop(self) -> None:
        self.set_workers(0)

    def answers(self) -> list[Answer]:
        with self._lock:
            return list(self._answers)

    def _work(self, stop: threading.Event) -> None:
        with httpx.Client(timeout=30) as client:
            while not stop.is_set():
                sent = time.monotonic()
                try:
                    status = client.get(self._url).status_code
                except httpx.HTTPError:
                    status = 0
                answer = Answer(sent, time.monotonic() - sent, status)
                with self._lock:
                    self._answers.append(answer)
