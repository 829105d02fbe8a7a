"""A real Prometheus on loopback for the real tier: the Debian `prometheus`
binary with a copy of monitoring/prometheus.yml scraping every second."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any, Callable

import httpx
import yaml

from tests.support.stack import free_port

__all__ = ["MONITORING", "Prometheus"]

MONITORING = Path(__file__).resolve().parents[2] / "monitoring"
PROMETHEUS = "/usr/bin/prometheus"


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

    def target_health(self, expected: int, timeout_s: float = 20) -> dict[str, str]:
        """scrape URL -> health, once `expected` targets have been scraped at least once."""
        deadline = time.monotonic() + timeout_s
        while True:
            active = self.http.get("/api/v1/targets").json()["data"]["activeTargets"]
            health = {target["scrapeUrl"]: target["health"] for target in active}
            if len(health) >= expected and "unknown" not in health.values():
                return health
            assert time.monotonic() < deadline, f"targets never all scraped: {health}"
            time.sleep(0.25)

    def stop(self) -> None:
        self.http.close()
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self.log.close()
