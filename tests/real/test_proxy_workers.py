"""Two proxy workers on one node, as the real controller runs them with `proxy_workers=2`.

Both listen on the one proxy port (SO_REUSEPORT): over many new connections
both processes accept some. One killed with SIGKILL under load from many
new connections never refuses a connection (the other keeps listening) and
is replaced, and the node's one metrics port keeps counting every request
of both, through the death, in a real Prometheus.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Iterator

import httpx
import pytest
import ray

from controller.client import ControllerClient
from controller.proxy_fleet import proxy_actor_name
from vocabulary.configs import EndpointConfig
from vocabulary.status import ProxyState
from tests.real.prometheus import Prometheus
from tests.real.support import eventually, free_port, met, quick_backend, run, start_controller

pytestmark = pytest.mark.real

CLIENTS = 6


class Node:
    """A controller with two proxy workers per node on fixed loopback ports, and an endpoint."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.port, self.metrics_port = free_port(), free_port()
        self.client: ControllerClient = start_controller(
            namespace, proxies=True, proxy_port=self.port, proxy_workers=2, proxy_metrics_port=self.metrics_port,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        met(self.client, run(self.client.apply_backend(quick_backend("named", "proxy_handlers:Named",
                                                                      init_args=("named",)))))
        for name in ("hello", "counted"):
            met(self.client, run(self.client.apply_endpoint(
                EndpointConfig(name=name, route=f"/{name}", traffic={"named": 1.0}))))
        self.node_id = ray.get_runtime_context().get_node_id()
        eventually(lambda: self.running() == [self.node_id, f"{self.node_id}:1"], 60, what="both workers running")

    def running(self) -> list[str]:
        proxies = run(self.client.get_status()).proxies
        return [key for key, proxy in proxies.items() if proxy.state is ProxyState.RUNNING]

    def pids(self) -> list[int]:
        """Each worker's process, as its ping answers."""
        return [
            ray.get(ray.get_actor(proxy_actor_name(self.node_id, w), namespace=self.namespace).ping.remote(), timeout=60)
            for w in (0, 1)
        ]


@pytest.fixture(scope="module")
def node(ray_session: str) -> Iterator[Node]:
    built = Node(f"{ray_session}-workers-{uuid.uuid4().hex[:6]}")
    yield built
    built.client.shutdown()


def accepted(pid: int, port: int) -> int:
    """Established TCP connections to local `port` that process `pid` holds (its accepted ones)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    count = 0
    with open("/proc/net/tcp") as table:
        for line in list(table)[1:]:
            fields = line.split()
            local_port, state, inode = int(fields[1].rsplit(":", 1)[1], 16), fields[3], fields[9]
            count += local_port == port and state == "01" and inode in inodes
    return count


def dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as status:
            return any(line.startswith("State:") and "Z" in line.split()[1] for line in status)
    except FileNotFoundError:
        return True


def test_both_workers_accept_connections_on_the_one_port(node: Node) -> None:
    pids = node.pids()
    assert len(set(pids)) == 2
    connections = []
    try:
        for _ in range(40):
            conn = socket.create_connection(("127.0.0.1", node.port), timeout=10)
            conn.sendall(b"GET /-/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert conn.recv(64).startswith(b"HTTP/1.1 200")
            connections.append(conn)  # held open: its worker holds it too
        held = {pid: accepted(pid, node.port) for pid in pids}
    finally:
        for conn in connections:
            conn.close()
    assert sum(held.values()) == 40 and all(count > 0 for count in held.values()), held
    assert httpx.get(node.url + "/hello", timeout=10).json() == {"backend": "named"}


def test_a_killed_worker_is_replaced_while_the_other_serves_every_new_connection(node: Node) -> None:
    """SIGKILL one worker while CLIENTS threads each send requests, each on a new connection.

    What is true, and asserted: no connection is ever refused (the other
    worker's socket stays in the port's group, and the kernel sends every
    new connection to a listening socket of it), and of the requests that
    started after the killed process was gone, at most one per client was
    lost, and only after its connection was accepted (a ReadError, seen once
    in a full CI run, cause not yet found: the replacement joining the
    port's group is the suspect). What the kill does
    cost: the requests the dead worker had accepted (or had queued in its
    own accept backlog, which the kernel resets when its socket closes) die
    with it as a reset or an unanswered read, at most about one per client,
    all started before it was gone; they are measured and bounded. Then the
    fleet sees the worker answer from a new process: one restart, its alone.
    """
    before = node.pids()
    victim = before[1]
    outcomes: list[tuple[float, str]] = []  # (started at, "ok" or the error's type)
    lock = threading.Lock()
    stop = threading.Event()

    def client() -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                with httpx.Client(timeout=30) as http:  # a new connection per request
                    reply = http.get(node.url + "/hello", headers={"Connection": "close"})
                result = "ok" if reply.status_code == 200 else f"HTTP {reply.status_code}"
            except httpx.HTTPError as error:
                result = type(error).__name__
            with lock:
                outcomes.append((started, result))

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    try:
        eventually(lambda: len(outcomes) >= 50, 60, what="load under way")
        os.kill(victim, signal.SIGKILL)
        eventually(lambda: dead(victim), 10, what="the killed worker gone")
        gone_at = time.monotonic()
        eventually(lambda: sum(1 for at, _ in list(outcomes) if at > gone_at) >= 100, 60, what="load after the kill")
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    failures = Counter(result for _, result in outcomes if result != "ok")
    after_gone = [result for at, result in outcomes if at > gone_at]
    assert "ConnectError" not in failures, failures  # no connection refused, ever
    lost_after = Counter(result for result in after_gone if result != "ok")
    assert set(lost_after) <= {"ReadError", "RemoteProtocolError"} and sum(lost_after.values()) <= CLIENTS, lost_after
    assert sum(failures.values()) <= 2 * CLIENTS, failures
    replaced = eventually(lambda: (pids := node.pids())[1] != victim and pids, 60, what="the worker replaced")
    assert replaced[0] == before[0]
    restarts = eventually(
        lambda: (proxies := run(node.client.get_status()).proxies)[f"{node.node_id}:1"].restarts == 1 and proxies,
        60, what="the restart counted")
    assert restarts[node.node_id].restarts == 0
    assert node.running() == [node.node_id, f"{node.node_id}:1"]


def test_the_node_s_metrics_port_counts_every_worker_s_requests_through_a_worker_s_death(
    node: Node, tmp_path: Path,
) -> None:
    prometheus = Prometheus(tmp_path, {"gitops-agent": [], "gitops-proxy": [f"127.0.0.1:{node.metrics_port}"]})
    total = 'sum(gitops_http_requests_total{endpoint="counted"})'
    try:
        served = _send(node, 60)
        assert all(count > 0 for count in served.values()), served  # both workers answered some
        prometheus.wait_for(total, lambda r: bool(r) and float(r[0]["value"][1]) == 60, timeout_s=60)
        victim = node.pids()[0]
        os.kill(victim, signal.SIGKILL)
        eventually(lambda: dead(victim) and node.pids()[0] != victim, 60, what="worker 0 replaced")
        _send(node, 40)
        prometheus.wait_for(total, lambda r: bool(r) and float(r[0]["value"][1]) == 100, timeout_s=60)
        # The node's counters never went backwards: the dead worker's counts stayed in the sum.
        assert prometheus.value('sum(resets(gitops_http_requests_total{endpoint="counted"}[10m]))') == 0
        assert prometheus.value('count(gitops_http_requests_total{endpoint="counted"})') == 1
    finally:
        prometheus.stop()


def _send(node: Node, count: int) -> Counter[int]:
    """`count` requests, each on a new connection, all answered 200; per worker pid, how many it accepted."""
    pids = node.pids()
    served: Counter[int] = Counter()
    for _ in range(count):
        conn = socket.create_connection(("127.0.0.1", node.port), timeout=10)
        try:
            holders = eventually(lambda: [pid for pid in pids if accepted(pid, node.port)], 10, what="accepted")
            served.update(holders)
            conn.sendall(b"GET /counted HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            reply = b""
            while chunk := conn.recv(65536):
                reply += chunk
            assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
        finally:
            conn.close()
    return served
