"""The audit trail's cost: proxy req/s and p99 with tracing and capture on, against off.

One local Ray, our controller with one proxy worker and the `noop` handler
(`bench.proxy_apps`) on one replica; `wrk` POSTs 1 KiB bodies at 32
connections (by default). Rows:

- off: a controller without `--otlp-endpoint`, the endpoint without
  `[capture]` (the baseline), running beside the measured one: each round
  measures off, then the configuration, and the ratio is of their medians
  (the machine's load moves both alike);
- tracing 0% / 1% / 100%: a second controller exporting to a loopback
  OTLP/HTTP receiver (it answers 200 and keeps nothing), the endpoint's
  `[tracing] sample`; requests carry no `traceparent`;
- capture 10% / 100%: that controller with tracing at 0% and `[capture]`
  writing to a tmp directory; the records written and dropped in each run
  are read from the proxy's `gitops_capture_records_total`.

Targets (issue 31): at 1% tracing and at 10% capture, req/s at least 0.95x
of off. On a shared machine the figures move by several percent between
runs: `--repeats` keeps the median.

    python -m bench.audit [--tiny] [--json PATH] [--duration S] [--connections N]

`bench.report` (`make bench`) runs it and judges the targets (`bench.targets`).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import httpx

from bench import results, wrk
from bench.stacks import free_port, own_ray

BODY_BYTES = 1024
TARGET_RATIO = 0.95


class _Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 — http.server's naming
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def otlp_receiver() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def controller(otlp_endpoint: str | None) -> Iterator[tuple[Any, str, str]]:
    """Our controller with one proxy worker and the noop backend; (client, proxy URL, metrics URL)."""
    from controller.client import start_or_connect
    from vocabulary.spec.backends import BackendConfig
    from vocabulary.control.goal_api import PROXY_CLASS

    port, metrics_port = free_port(), free_port()
    options: dict[str, Any] = {
        "proxy_class": PROXY_CLASS, "proxy_workers": 1, "proxy_metrics_port": metrics_port,
        "otlp_endpoint": otlp_endpoint,
    }
    client = start_or_connect(namespace=f"bench-audit-{uuid.uuid4().hex[:6]}", proxy_port=port, options=options)
    try:
        backend = BackendConfig(name="bench", version="v1", import_path="bench.proxy_apps:noop",
                                num_replicas=1, ray_actor_options={"num_cpus": 0}, commit="0123456789abcdef")
        asyncio.run(_met(client, client.apply_backend(backend)))
        yield client, f"http://127.0.0.1:{port}/", f"http://127.0.0.1:{metrics_port}/metrics"
    finally:
        client.shutdown()


async def _met(client: Any, goal: Any) -> None:
    from vocabulary.control.goals import GoalState

    result = await client.wait_for_goal(await goal, 120)
    if result.state != GoalState.MET:
        raise RuntimeError(f"goal not met: {result}")


def serve_endpoint(client: Any, url: str, **fields: Any) -> None:
    """The endpoint with `fields` (tracing, capture), once the proxy serves it."""
    from vocabulary.spec.endpoints import EndpointConfig

    config = EndpointConfig(name="bench", route="/", traffic={"bench": 1.0}, **fields)
    asyncio.run(_met(client, client.apply_endpoint(config)))
    wrk.wait_for_http(url, ok=lambda response: True)
    # The long poll reaches the proxy a moment after the goal is met.
    for _ in range(50):
        if httpx.post(url, content=b"x").status_code == 200:
            break


def captured(metrics_url: str) -> dict[str, float]:
    text = httpx.get(metrics_url, timeout=10).text
    found = {"written": 0.0, "dropped": 0.0}
    for result, value in re.findall(r'^gitops_capture_records_total\{result="(\w+)"\} (\S+)$', text, re.M):
        found[result] = float(value)
    return found


def load(url: str, script: Path, duration_s: float, connections: int, warmup_s: float) -> dict[str, float]:
    if warmup_s > 0:
        subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{max(1, round(warmup_s))}s", "-s", str(script), url],
                       capture_output=True, check=True)
    done = subprocess.run(
        ["wrk", "-t2", f"-c{connections}", f"-d{max(1, round(duration_s))}s", "--timeout", "10s", "--latency",
         "-s", str(script), url],
        capture_output=True, text=True, check=True,
    )
    return wrk.parse(done.stdout)


def measure(args: Any) -> list[dict[str, Any]]:
    from vocabulary.spec.endpoints import CaptureConfig, TracingConfig

    own_ray()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "post.lua"
        script.write_text(f'wrk.method = "POST"\nwrk.body = string.rep("a", {BODY_BYTES})\n'
                          'wrk.headers["Content-Type"] = "application/octet-stream"\n')
        sink = f"file://{tmp}/capture"

        def run(name: str, off_url: str, url: str, metrics_url: str) -> None:
            """`repeats` rounds, each measuring off and then this configuration: a paired baseline."""
            before = captured(metrics_url)
            offs, runs = [], []
            for _ in range(args.repeats):
                offs.append(load(off_url, script, args.duration, args.connections, args.warmup))
                runs.append(load(url, script, args.duration, args.connections, args.warmup))
            after = captured(metrics_url)
            off_rps = statistics.median(r["rps"] for r in offs)
            row = {
                "config": name,
                "rps": statistics.median(r["rps"] for r in runs),
                "off_rps": off_rps,
                "ratio": statistics.median(r["rps"] for r in runs) / off_rps if off_rps else 0.0,
                "p99_ms": statistics.median(r["p99_ms"] for r in runs),
                "off_p99_ms": statistics.median(r["p99_ms"] for r in offs),
                "non_2xx": sum(r["non_2xx"] + r["socket_errors"] for r in runs),
                "records_written": after["written"] - before["written"],
                "records_dropped": after["dropped"] - before["dropped"],
            }
            rows.append(row)
            print(f"  {name}: {row}", file=sys.stderr, flush=True)

        with controller(None) as (off_client, off_url, _), otlp_receiver() as receiver, \
                controller(receiver) as (client, url, metrics_url):
            serve_endpoint(off_client, off_url)
            for share in (0.0, 0.01, 1.0):
                serve_endpoint(client, url, tracing=TracingConfig(sample=share))
                run(f"tracing {share:.0%}", off_url, url, metrics_url)
            for share in (0.1, 1.0):
                serve_endpoint(client, url, tracing=TracingConfig(sample=0.0),
                               capture=CaptureConfig(sample=share, sink=sink))
                run(f"capture {share:.0%}", off_url, url, metrics_url)
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'config':<14}{'req/s':>9}{'off req/s':>11}{'x off':>7}{'p99 ms':>8}{'off p99':>9}"
          f"{'written':>9}{'dropped':>9}{'errors':>8}")
    for row in rows:
        print(f"{row['config']:<14}{row['rps']:>9.0f}{row['off_rps']:>11.0f}{row['ratio']:>7.2f}{row['p99_ms']:>8.1f}"
              f"{row['off_p99_ms']:>9.1f}{row['records_written']:>9.0f}{row['records_dropped']:>9.0f}{row['non_2xx']:>8.0f}")


def main() -> int:
    parser = results.parser(__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per measured run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--connections", type=int, default=32)
    args = parser.parse_args()
    if args.tiny:
        args.duration, args.repeats, args.warmup, args.connections = 1.0, 1, 0.0, 8
    rows = measure(args)
    print_table(rows)
    targets = {r["config"]: r["ratio"] >= TARGET_RATIO for r in rows if r["config"] in ("tracing 1%", "capture 10%")}
    results.write(args.json, "audit", args.tiny, {"rows": rows, "targets_met": targets})
    return 0


if __name__ == "__main__":
    sys.exit(main())
