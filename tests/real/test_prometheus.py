"""A real Prometheus scrapes the agent and the proxy with the shipped config.

Prometheus (Debian's package, installed by `make test`) runs on loopback
with a copy of monitoring/prometheus.yml whose only changes are the
targets, a 1 s scrape and evaluation interval, and the absolute path of the
shipped alert rules. There is no skip when it is missing: the test fails.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from proxy.metrics import ProxyMetrics

pytestmark = pytest.mark.real

MONITORING = Path(__file__).resolve().parents[2] / "monitoring"
PROMETHEUS = "/usr/bin/prometheus"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    """One Prometheus process on loopback, queried through its HTTP API."""

    def __init__(self, workdir: Path, targets: dict[str, list[str]]) -> None:
        config = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
        config["global"].update(scrape_interval="1s", evaluation_interval="1s")
        config["rule_files"] = [str(MONITORING / name) for name in config["rule_files"]]
        for job in config["scrape_configs"]:
            job["static_configs"] = [{"targets": targets[job["job_name"]]}]
        config_file = workdir / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(config))
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = (workdir / "prometheus.log").open("w")
        self.process = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config_file}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address={self.url.removeprefix('http://')}",
                "--log.level=warn",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.http = httpx.Client(base_url=self.url, timeout=5)
        self._wait_ready()

    def _wait_ready(self, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process.poll() is None, "prometheus exited; see prometheus.log"
            try:
                if self.http.get("/-/ready").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError("prometheus did not become ready")

    def query(self, expr: str) -> list[dict[str, Any]]:
        reply = self.http.get("/api/v1/query", params={"query": expr})
        body = reply.json()
        assert body.get("status") == "success", f"{expr}: {body}"
        return body["data"]["result"]

    def value(self, expr: str) -> float | None:
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None

    def wait_for(
        self, expr: str, done: Callable[[list[dict[str, Any]]], bool], timeout_s: float = 20
    ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while True:
            result = self.query(expr)
            if done(result):
                return result
            assert time.monotonic() < deadline, f"{expr} never satisfied; last result {result}"
            time.sleep(0.25)

    def targets_up(self) -> dict[str, str]:
        active = self.http.get("/api/v1/targets").json()["data"]["activeTargets"]
        return {target["scrapeUrl"]: target["health"] for target in active}

    def stop(self) -> None:
        self.http.close()
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self.log.close()


@pytest.fixture
def start_prometheus(tmp_path: Path) -> Iterator[Callable[[dict[str, list[str]]], Prometheus]]:
    started: list[Prometheus] = []

    def start(targets: dict[str, list[str]]) -> Prometheus:
        started.append(Prometheus(tmp_path, targets))
        return started[-1]

    yield start
    for prometheus in started:
        prometheus.stop()


def test_a_restarted_proxy_is_one_series_whose_counter_resets_like_any_process(
    start_prometheus: Callable[[dict[str, list[str]]], Prometheus],
) -> None:
    port = free_port()
    before = ProxyMetrics()
    before.serve("127.0.0.1", port)
    prometheus = start_prometheus({"gitops-agent": [], "gitops-proxy": [f"127.0.0.1:{port}"]})
    try:
        for _ in range(5):
            before.request_finished("echo", "v1", 200, 0.01)
        total = 'gitops_http_requests_total{endpoint="echo"}'
        prometheus.wait_for(total, lambda r: bool(r) and float(r[0]["value"][1]) == 5)
    finally:
        before.close()
    after = ProxyMetrics()
    after.serve("127.0.0.1", port)
    try:
        for _ in range(2):
            after.request_finished("echo", "v1", 200, 0.01)
        prometheus.wait_for(total, lambda r: bool(r) and float(r[0]["value"][1]) == 2)
        # Same target, same labels: one series, not an old and a new one summed.
        assert prometheus.value(f"count({total})") == 1
        assert prometheus.value(f"sum({total})") == 2
        # Prometheus sees exactly one counter reset, as for any process restart...
        assert prometheus.value(f"resets({total}[5m])") == 1
        # ...and increase() counts through it instead of going negative.
        assert prometheus.value(f"increase({total}[5m])") >= 2
    finally:
        after.close()
