"""A Ray cluster of a scenario's own, started as a user starts one: `ray start --head`.

Owns starting a head node on loopback ports of its own (so it never meets
the test session's Ray or another test's), killing all of it the hard way
(its process group, as a crashed machine would), starting it again on the
same GCS port, and killing and restarting just its GCS server (for GCS
fault tolerance on an external Redis). Also a throwaway `redis-server`.
Never uses `ray stop` (it would stop every Ray on the machine) nor the
default /tmp/ray (a bare `ray.init()` elsewhere would join this cluster).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.stack import eventually, free_port

__all__ = ["RayHead", "RedisServer"]

_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


class RayHead:
    def __init__(
        self, workdir: Path, env: dict[str, str] | None = None, num_cpus: int = 2, node_ip: str = "127.0.0.1",
    ) -> None:
        """`node_ip`: the head's address; Ray swaps 127.0.0.1 for the machine's own, not another loopback one."""
        self.port = free_port()
        self.node_ip = node_ip
        self.address = f"{node_ip}:{self.port}"
        self._log = workdir / "ray-head.log"
        # A temp dir of its own: `ray start` writes the cluster's address to
        # <temp-dir>/ray_current_cluster, and any `ray.init()` on this machine
        # with the default /tmp/ray would join (or hang on) this cluster.
        self._temp_dir = Path(tempfile.mkdtemp(prefix="rgh-", dir="/tmp"))
        self._env = {**os.environ, **_ENV, **(env or {})}
        self._num_cpus = num_cpus
        self.start()

    def start(self) -> None:
        """`ray start --head` (it returns once the head runs, leaving Ray's processes behind)."""
        ray = shutil.which("ray", path=str(Path(sys.executable).parent)) or "ray"
        command = [
            ray, "start", "--head", f"--node-ip-address={self.node_ip}", f"--port={self.port}",
            f"--num-cpus={self._num_cpus}", "--include-dashboard=false", "--disable-usage-stats",
            *_node_ports(), f"--temp-dir={self._temp_dir}",
        ]
        self._ray_start(command)

    def add_node(self, node_ip: str, num_cpus: int) -> None:
        """Another node of this cluster on this machine, at its own loopback address (e.g. 127.0.0.2)."""
        ray = shutil.which("ray", path=str(Path(sys.executable).parent)) or "ray"
        self._ray_start([ray, "start", f"--address={self.address}", f"--node-ip-address={node_ip}",
                         f"--num-cpus={num_cpus}", "--disable-usage-stats", *_node_ports()])

    def _ray_start(self, command: list[str]) -> None:
        with self._log.open("a") as log:
            done = subprocess.run(command, env=self._env, stdout=log, stderr=subprocess.STDOUT, timeout=120,
                                  start_new_session=True, check=False)
        if done.returncode != 0:
            raise AssertionError(f"ray start exited {done.returncode}:\n{self._log.read_text()[-2000:]}")

    def kill(self) -> None:
        """SIGKILL every process of this cluster (GCS, raylet, agents, workers): Ray is gone."""
        for pid in self._pids():
            _kill(pid)
        eventually(lambda: not self._pids(), 30, what="every process of the Ray head gone")

    def remove(self) -> None:
        """Kill it and delete its temp dir (sessions, logs, sockets)."""
        self.kill()
        shutil.rmtree(self._temp_dir, ignore_errors=True)

    def kill_gcs(self) -> list[str]:
        """SIGKILL the GCS server alone; returns its command line (to start it again)."""
        [pid] = self._gcs_pids()
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        _kill(pid)
        eventually(lambda: not self._gcs_pids(), 30, what="the GCS gone")
        return [part.decode() for part in command if part]

    def start_gcs(self, command: list[str]) -> None:
        with self._log.open("a") as log:
            subprocess.Popen(command, env=self._env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        eventually(self._gcs_pids, 30, what="the GCS running again")

    def pids(self) -> list[int]:
        """Every process of this cluster (its GCS, raylets, agents and workers)."""
        return self._pids()

    def _pids(self) -> list[int]:
        # Every Ray process names the GCS (`--gcs-address=HOST:PORT`, any
        # host: Ray may pick the machine's address over the one given); a
        # driver such as the agent does not, and is left alone.
        ours = re.compile(rf"(--gcs_server_port={self.port}|gcs[-_]address=\S+:{self.port})\b")
        return _pids_matching(ours)


    def _gcs_pids(self) -> list[int]:
        return _pids_matching(re.compile(rf"--gcs_server_port={self.port}\b"))


def _node_ports() -> list[str]:
    """Free ports for a node's agents (two nodes on one machine cannot share Ray's defaults)."""
    return [f"--dashboard-agent-listen-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}",
            f"--runtime-env-agent-port={free_port()}", f"--metrics-export-port={free_port()}"]


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _pids_matching(pattern: re.Pattern[str]) -> list[int]:
    """Processes whose command line matches `pattern`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if pattern.search(command):
            found.append(int(entry.name))
    return found


class RedisServer:
    """`redis-server` on a free loopback port, no persistence to disk."""

    def __init__(self) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self._process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        eventually(self._answers, 20, what="redis answering PING")

    def _answers(self) -> bool:
        done = subprocess.run(["redis-cli", "-p", str(self.port), "ping"], capture_output=True, text=True, check=False)
        return done.stdout.strip() == "PONG"

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait(10)
