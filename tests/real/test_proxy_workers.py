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
from controller.state.proxy_fleet import proxy_actor_name
from tests.support.prometheus import Prometheus
from tests.support.stack import eventually, free_port, met, quick_backend, run, start_controller
from vocabulary.control.status import ProxyState
from vocabulary.spec.endpoints import EndpointConfig

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


def test_each_worker_runs_at_normal_cpu_priority_where_the_node_allows_it(node: Node) -> None:
    """Ray starts every worker at nice 15; a proxy worker, on every request's path, goes back to 0 (as root)."""
    expected = 0 if os.geteuid() == 0 else 15
    for pid in node.pids():
        nice = {}
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                nice[int(task)] = os.getpriority(os.PRIO_PROCESS, int(task))
            except ProcessLookupError:
                continue  # a thread that ended meanwhile
        assert nice and set(nice.values()) == {expected}, (pid, nice)


def accepted(pid: int, port: int) -> int:
    """Established TCP connections to local `port` that process `pid` holds (its accepted ones)."""
    return len(_sockets(pid) & on_port(port, "01"))


def listening(pid: int, port: int) -> set[str]:
    """The sockets of process `pid` listening on local `port` (their inodes)."""
    return _sockets(pid) & on_port(port, "0A")


def _sockets(pid: int) -> set[str]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    return inodes


def on_port(port: int, state: str) -> set[str]:
    """Inodes of the TCP sockets on local `port` in `state` ("01" established, "0A" listening), as the kernel
    lists them."""
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in list(table)[1:]]
    return {row[9] for row in rows if int(row[1].rsplit(":", 1)[1], 16) == port and row[3] == state}


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
    new connection to a listening socket of it), and every request that
    started after the killed worker's listening socket was gone succeeded,
    through its replacement joining the port too. What the kill does cost:
    the requests the dead worker held die with it as a reset or an
    unanswered read: those it had accepted, and those the kernel queued on
    its listening socket until the socket closed; all started before, and
    they are measured and bounded. Gone means that socket closed, not the
    process's main thread a zombie: the kernel closes a killed process's
    files only once its last thread has exited, here up to half a second
    later, and new connections hashed to the socket meanwhile were reset
    (the ReadError one CI run saw). Then the fleet sees the worker answer
    from a new process: one restart, its alone.
    """
    before = node.pids()
    victim = before[1]
    its_socket = listening(victim, node.port)
    assert its_socket
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

    def served_since(at: float) -> int:
        return sum(1 for started, _ in list(outcomes) if started > at)

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    try:
        eventually(lambda: len(outcomes) >= 50, 60, what="load under way")
        os.kill(victim, signal.SIGKILL)
        eventually(lambda: not its_socket & on_port(node.port, "0A"), 30, what="the killed worker's socket closed")
        gone_at = time.monotonic()
        eventually(lambda: served_since(gone_at) >= 100, 60, what="load after the kill")
        replaced = eventually(lambda: (pids := node.pids())[1] != victim and pids, 60, what="the worker replaced")
        eventually(lambda: listening(replaced[1], node.port), 60, what="the replacement listening")
        joined_at = time.monotonic()
        eventually(lambda: served_since(joined_at) >= 100, 60, what="load after the replacement joined")
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    failures = Counter(result for _, result in outcomes if result != "ok")
    after_gone = [result for at, result in outcomes if at > gone_at]
    assert "ConnectError" not in failures, failures  # no connection refused, ever
    assert set(after_gone) == {"ok"}, Counter(after_gone)
    assert sum(failures.values()) <= 2 * CLIENTS, failures
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
