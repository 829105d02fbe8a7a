"""A node's proxy workers share their metrics port and metrics: any worker answers the node's sum.

Each "worker" here is a plain process doing what a proxy worker does at its
start (`use_multiprocess_dir`, `ProxyMetrics().serve`), then counting requests
and an in-flight gauge on command. Real processes: prometheus_client's storage
switch is process-wide, and a worker's death is what the files must survive.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy.shell import shared_ports

ROOT = Path(__file__).resolve().parents[2]
WORKER = """
import sys
from proxy.observability.metrics import ProxyMetrics, use_multiprocess_dir
use_multiprocess_dir(sys.argv[1])
metrics = ProxyMetrics()
metrics.retain(["e"], ["b"])
metrics.serve("127.0.0.1", int(sys.argv[2]))
print("ready", flush=True)
for line in sys.stdin:
    requests, ongoing = map(int, line.split())
    for _ in range(requests):
        metrics.request_finished("e", "b", 200, 0.001)
    metrics.set_ongoing("b", ongoing)
    print("done", flush=True)
"""


class Worker:
    def __init__(self, directory: Path, port: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(directory), str(port)], cwd=ROOT,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        line = self.process.stdout.readline()
        assert line == "ready\n", self.process.stderr.read()

    def count(self, requests: int, ongoing: int) -> None:
        self.process.stdin.write(f"{requests} {ongoing}\n")
        self.process.stdin.flush()
        assert self.process.stdout.readline() == "done\n"

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.kill()
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            stream.close()


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[Path, int, list[Worker]]]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    workers: list[Worker] = []
    yield tmp_path / "metrics", port, workers
    for worker in workers:
        worker.stop()


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """One scrape on a new connection: every sample by name and labels."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", headers={"Connection": "close"}, timeout=10).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text) for s in family.samples
    }


REQUESTS = ("gitops_http_requests_total", (("backend", "b"), ("code", "200"), ("endpoint", "e")))
ONGOING = ("gitops_backend_ongoing_requests", (("backend", "b"),))


def test_every_scrape_of_the_shared_port_answers_the_sum_of_all_workers(node) -> None:
    directory, port, workers = node
    workers += [Worker(directory, port), Worker(directory, port)]
    workers[0].count(3, 2)
    workers[1].count(4, 5)
    answers = [scrape(port) for _ in range(20)]  # new connections: the kernel spreads them over both workers
    assert {(a[REQUESTS], a[ONGOING]) for a in answers} == {(7, 7)}
    assert oct(directory.stat().st_mode & 0o777) == "0o700"


def test_a_dead_worker_s_counts_stay_and_its_in_flight_gauge_goes(node) -> None:
    directory, port, workers = node
    workers += [Worker(directory, port), Worker(directory, port)]
    workers[0].count(3, 2)
    workers[1].count(4, 5)
    workers[1].kill()
    workers.append(Worker(directory, port))  # its replacement
    workers[2].count(1, 1)
    answers = [scrape(port) for _ in range(10)]
    assert {(a[REQUESTS], a[ONGOING]) for a in answers} == {(8, 3)}


def test_a_node_whose_workers_all_died_starts_again_from_zero(node) -> None:
    """A new agent (or the only worker restarted) never inherits an earlier group's requests."""
    directory, port, workers = node
    workers += [Worker(directory, port), Worker(directory, port)]
    workers[0].count(3, 0)
    workers[1].count(4, 0)
    for worker in workers:
        worker.kill()
    workers.append(Worker(directory, port))
    workers[2].count(2, 1)
    answers = [scrape(port) for _ in range(5)]
    assert {(a[REQUESTS], a[ONGOING]) for a in answers} == {(2, 1)}


def test_a_directory_other_users_can_enter_is_refused(tmp_path: Path) -> None:
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o755)
    open_dir.chmod(0o755)
    result = subprocess.run(
        [sys.executable, "-c",
         "import sys; from proxy.observability.metrics import use_multiprocess_dir; use_multiprocess_dir(sys.argv[1])",
         str(open_dir)], cwd=ROOT, capture_output=True, text=True,
    )
    assert result.returncode != 0 and "is not a private directory of this user (0700)" in result.stderr


def test_a_port_claimed_by_one_group_of_workers_is_refused_to_another_until_they_are_gone() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    first = shared_ports.claim("127.0.0.1", port, "group-a")
    second = shared_ports.claim("127.0.0.1", port, "group-a")  # the same group's next worker joins
    with pytest.raises(OSError, match="in use by the proxies of group-a"):
        shared_ports.claim("127.0.0.1", port, "group-b")
    shared_ports.release(first)
    with pytest.raises(OSError, match="group-a"):
        shared_ports.claim("127.0.0.1", port, "group-b")
    shared_ports.release(second)
    shared_ports.release(shared_ports.claim("127.0.0.1", port, "group-b"))


def test_a_shared_listening_socket_is_joined_by_its_group_but_a_plain_one_is_not() -> None:
    first = shared_ports.bind("127.0.0.1", 0, "g")
    first.listen()
    port = first.getsockname()[1]
    try:
        second = shared_ports.bind("127.0.0.1", port, "g")
        second.close()
        with pytest.raises(OSError):
            shared_ports.bind("127.0.0.1", port, None)
    finally:
        first.close()
