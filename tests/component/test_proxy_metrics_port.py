"""The proxy's metrics port is served by the bounded server of every other listener
(issue 50 row 13): idle connections hold no thread and are closed after the edge's
timeouts, and the page is what it was (text, gzipped when asked)."""

from __future__ import annotations

import gzip
import socket
import threading
import time
import urllib.request

from httpedge.limits import EdgeLimits
from proxy.observability.metrics import ProxyMetrics


def _idle(port: int, count: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(count)]


def test_idle_connections_to_the_metrics_port_hold_no_thread() -> None:
    metrics = ProxyMetrics()
    before = threading.active_count()
    port = metrics.serve("127.0.0.1", 0)
    idle: list[socket.socket] = []
    try:
        idle = _idle(port, 200)
        time.sleep(0.5)  # a thread per connection would have started by now
        assert threading.active_count() - before <= 2, threading.active_count() - before
        metrics.request_finished("echo", "v1", 200, 0.01)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            assert 'gitops_http_requests_total{backend="v1",code="200",endpoint="echo"} 1.0' in reply.read().decode()
    finally:
        for connection in idle:
            connection.close()
        metrics.close()
    time.sleep(0.2)
    assert threading.active_count() <= before


def test_idle_connections_are_closed_after_the_edge_timeouts_and_the_page_can_be_gzipped() -> None:
    metrics = ProxyMetrics()
    port = metrics.serve("127.0.0.1", 0, EdgeLimits(header_timeout_s=0.3, keep_alive_s=0.3))
    try:
        (silent,) = _idle(port, 1)
        silent.settimeout(5)
        started = time.monotonic()
        answer = silent.recv(65536)  # 408, then the connection closes
        while answer and silent.recv(65536):
            pass
        assert time.monotonic() - started < 3 and answer.startswith(b"HTTP/1.1 408")
        request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(request, timeout=5) as reply:
            assert reply.headers["content-encoding"] == "gzip"
            assert b"gitops_http_requests_total" in gzip.decompress(reply.read())
    finally:
        metrics.close()
