"""Serving features side by side with Ray Serve 2.60: batching, handle calls, streaming (issue 13).

The same user code (`bench.serving_apps`) on both systems, each in its own
subprocess with its own local Ray:

- batching: a numpy dense layer (one row per request) loaded by `wrk` at 32
  connections, one replica, as a plain handler and batched (ours:
  `[batching] max_batch_size = 16, batch_wait_timeout_s = 0.005`; Serve:
  `@serve.batch` with the same settings): req/s, p99, and batched / plain;
- handles: one replica calling another's echo handler (ours:
  `ray_gitops.serving.handle`; Serve: `DeploymentHandle`), timed inside the
  caller (no HTTP in it): p50 and p99 of sequential calls, calls/s 16 at a time;
- streaming: a `StreamingResponse` of 2,000 chunks of 1 KiB read with an
  httpx streaming client: time to first byte and chunks/s. A system that
  cannot stream yet (no 200, or a short body) is skipped with a printed line.

Serve runs in its fastest configuration measured by `bench.proxy`
(`RAY_SERVE_ENABLE_DIRECT_INGRESS=1`, access log off, `max_ongoing_requests=100`);
`--serve-proxy` uses its Python proxy instead. Prints every figure and each
ratio ours / Serve; never asserts on time.

    python -m bench.serving [--tiny] [--json PATH] [--systems serve,ours] [--duration 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx

from bench import results, serving_apps, stats, wrk
from bench.proxy import direct_targets, kill_haproxy
from bench.stacks import free_port, own_ray, serve_installed, serve_measured

ROOT = Path(__file__).resolve().parent.parent
SYSTEMS = ("serve", "ours")
CONNECTIONS = 32
STREAMS = 20
DIRECT_INGRESS = {"RAY_SERVE_ENABLE_DIRECT_INGRESS": "1"}


# --- measuring (the same for both systems) ------------------------------------------------------


def load(url: str, duration_s: float, warmup_s: float) -> dict[str, float]:
    return wrk.run(url, duration_s, CONNECTIONS, warmup_s)


def handle_figures(url: str) -> dict[str, float]:
    timed = httpx.get(url, timeout=600).json()
    sequential = sorted(seconds * 1000 for seconds in timed["sequential_s"])
    return {
        "p50_ms": stats.quantile(sequential, 0.5),
        "p99_ms": stats.quantile(sequential, 0.99),
        "concurrent_calls_per_s": timed["concurrent_calls_per_s"],
    }


def stream_figures(url: str, streams: int) -> dict[str, Any]:
    """TTFB and chunks/s of `streams` sequential streams; `skipped` says why when it does not stream."""
    expected = serving_apps.CHUNKS * serving_apps.CHUNK_BYTES
    ttfb_ms, chunks_per_s = [], []
    with httpx.Client(timeout=60) as http:
        for _ in range(streams):
            started = time.perf_counter()
            with http.stream("GET", url) as response:
                if response.status_code != 200:
                    return {"skipped": f"HTTP {response.status_code} for a streaming handler"}
                first, size = None, 0
                for chunk in response.iter_raw():
                    first = first or time.perf_counter()
                    size += len(chunk)
            done = time.perf_counter()
            if size != expected or first is None:
                return {"skipped": f"{size} of {expected} bytes arrived"}
            ttfb_ms.append((first - started) * 1000)
            chunks_per_s.append(serving_apps.CHUNKS / (done - started))
    return {"ttfb_p50_ms": stats.quantile(sorted(ttfb_ms), 0.5), "chunks_per_s": stats.quantile(sorted(chunks_per_s), 0.5)}


def measure(urls: Callable[[str], str], args: Any) -> dict[str, Any]:
    """Every figure of one system; `urls(app)` serves `app` and gives its URL."""
    parts: dict[str, Callable[[], Any]] = {
        "model": lambda: load(urls("model"), args.duration, args.warmup),
        "batched": lambda: load(urls("batched"), args.duration, args.warmup),
        "handles": lambda: handle_figures(urls("caller")),
        "stream": lambda: stream_figures(urls("stream"), args.streams),
    }
    figures: dict[str, Any] = {}
    for part, run in parts.items():
        try:
            figures[part] = run()
        except (RuntimeError, httpx.HTTPError, ValueError, KeyError) as error:  # one part failing keeps the others
            figures[part] = {"failed": str(error).splitlines()[-1] if str(error) else type(error).__name__}
    return figures


# --- the systems (each in its child process) ---------------------------------------------------


@contextlib.contextmanager
def ours() -> Iterator[Callable[[str], str]]:
    """Our controller, proxy and replicas on a local Ray; every app deployed up front."""
    from controller.client import start_or_connect
    from controller.cluster import init_ray, shutdown_ray
    from vocabulary.control.goals import GoalState
    from vocabulary.spec.backends import BackendConfig, BatchingConfig
    from vocabulary.spec.endpoints import EndpointConfig
    from vocabulary.control.goal_api import PROXY_CLASS

    own_ray()
    namespace = f"bench-{uuid.uuid4().hex[:6]}"
    init_ray(namespace=namespace)
    port = free_port()
    client = start_or_connect(namespace=namespace, proxy_port=port, options={"proxy_class": PROXY_CLASS})

    def backend(name: str, attribute: str, **fields: Any) -> BackendConfig:
        return BackendConfig(name=name, version="v1", import_path=f"bench.serving_apps:{attribute}",
                             ray_actor_options={"num_cpus": 0}, max_concurrent_queries=100, **fields)

    backends = [
        backend("model", "Model"),
        backend("batched", "BatchedModel", batching=BatchingConfig(
            max_batch_size=serving_apps.MAX_BATCH, batch_wait_timeout_s=serving_apps.BATCH_WAIT_S)),
        backend("echo", "echo"),
        backend("caller", "Caller", uses=("echo",)),
        backend("stream", "stream"),
    ]

    async def deploy() -> None:
        goals = [await client.apply_backend(config) for config in backends]
        goals += [await client.apply_endpoint(EndpointConfig(name=app, route=f"/{app}", traffic={app: 1.0}))
                  for app in ("model", "batched", "caller", "stream")]
        for goal in goals:
            result = await client.wait_for_goal(goal, 120)
            if result.state != GoalState.MET:
                raise RuntimeError(f"goal not met: {result}")

    def url(app: str) -> str:
        base = f"http://127.0.0.1:{port}/{app}"
        if app != "caller":  # as for Serve: its figure is taken inside it, on the one GET that measures
            # A goal met is not a warm route: the first call to a replica can take longer than a
            # tiny run's one second, which would measure nothing at all.
            wrk.wait_for_http(base)
        return base

    try:
        asyncio.run(deploy())
        yield url
    finally:
        client.shutdown()
        shutdown_ray()


@contextlib.contextmanager
def serve(direct: bool) -> Iterator[Callable[[str], str]]:
    """Ray Serve on a local Ray; each app runs alone while it is measured."""
    import ray
    from ray import serve as ray_serve

    from controller.cluster import init_ray, shutdown_ray

    own_ray()
    init_ray(namespace=f"bench-{uuid.uuid4().hex[:6]}")
    port = free_port()
    ray_serve.start(http_options={"host": "127.0.0.1", "port": port})
    options = {"max_ongoing_requests": 100, "logging_config": {"enable_access_log": False}}
    apps = {
        "model": lambda: serving_apps.serve_model(batched=False).options(**options).bind(),
        "batched": lambda: serving_apps.serve_model(batched=True).options(**options).bind(),
        "caller": serving_apps.serve_caller,
        "stream": lambda: serving_apps.serve_stream(),
    }
    running: list[str] = []

    def url(app: str) -> str:
        controller = ray.get_actor("SERVE_CONTROLLER_ACTOR", namespace="serve")
        for name in running:
            ray_serve.delete(name)
        running[:] = [app]
        # A deleted app's replica port lingers in Serve's targets for a while: never take it.
        stale = set(direct_targets(controller))
        ray_serve.run(apps[app](), name=app, route_prefix="/")
        base = f"http://127.0.0.1:{port}/"
        if app == "caller":  # its figure is taken inside it, on each GET: no probing, any HTTP path
            return base
        if direct:
            base = _new_target(controller, stale)
        wrk.wait_for_http(base)
        return base

    try:
        yield url
    finally:
        ray_serve.shutdown()
        kill_haproxy(port)
        shutdown_ray()


def _new_target(controller: Any, stale: set[str], timeout_s: float = 120) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        fresh = [url for url in direct_targets(controller) if url not in stale and ":8000/" not in url]
        if fresh:
            return fresh[0]
        time.sleep(0.2)
    raise RuntimeError("Serve never reported the new application's direct-ingress port")


def child(system: str, args: Any) -> dict[str, Any]:
    stack = ours() if system == "ours" else serve(direct=not args.serve_proxy)
    with stack as urls:
        return measure(urls, args)


def in_subprocess(system: str, args: Any) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    if system == "serve" and not args.serve_proxy:
        env.update(DIRECT_INGRESS)
    command = [sys.executable, "-m", "bench.serving", "--child", system, "--duration", str(args.duration),
               "--warmup", str(args.warmup), "--streams", str(args.streams), *(["--serve-proxy"] if args.serve_proxy else [])]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"exit {done.returncode}: " + "\n".join(done.stderr.strip().splitlines()[-6:]))
    return json.loads(lines[-1])


# --- printing -------------------------------------------------------------------------------------


def ratio(ours_value: float | None, serve_value: float | None) -> str:
    if not ours_value or not serve_value:
        return "—"
    return f"{ours_value / serve_value:.2f}x"


def figure(measured: dict[str, dict[str, Any]], system: str, part: str, key: str) -> float | None:
    """One figure, or None where the system or the part did not measure it."""
    value = measured.get(system, {}).get(part, {}).get(key)
    return float(value) if isinstance(value, (int, float)) else None


def not_measured(part: dict[str, Any]) -> str | None:
    """Why a part has no figures ("failed" or "skipped"), or None."""
    reason = part.get("failed") or part.get("skipped")
    return None if reason is None else f"{'failed' if 'failed' in part else 'skipped'}: {reason}"


def print_figures(measured: dict[str, dict[str, Any]]) -> None:
    print(f"batched numpy model (tanh(x @ W), W {serving_apps.DIM}x{serving_apps.DIM} float32), "
          f"1 replica, {CONNECTIONS} connections:")
    for system, f in measured.items():
        for part in ("model", "batched"):
            why = not_measured(f[part])
            print(f"  {system:<6}{part:<8}" + (why or f"{f[part]['rps']:8.0f} req/s  p99 {f[part]['p99_ms']:6.1f} ms"))
        batched = ratio(figure(measured, system, "batched", "rps"), figure(measured, system, "model", "rps"))
        print(f"  {system:<6}batched / plain: {batched}")
    print("handle calls, replica to replica (timed inside the caller):")
    for system, f in measured.items():
        h = f["handles"]
        print(f"  {system:<6}" + (not_measured(h) or f"p50 {h['p50_ms']:6.2f} ms  p99 {h['p99_ms']:6.2f} ms  "
                                   f"{h['concurrent_calls_per_s']:7.0f} calls/s at {serving_apps.CONCURRENT} concurrent"))
    print(f"streaming ({serving_apps.CHUNKS} chunks of {serving_apps.CHUNK_BYTES} B):")
    for system, f in measured.items():
        st = f["stream"]
        print(f"  {system:<6}" + (not_measured(st) or f"time to first byte {st['ttfb_p50_ms']:6.2f} ms  "
                                   f"{st['chunks_per_s']:9.0f} chunks/s"))
    if "ours" in measured and "serve" in measured:
        print("ours / Serve: " + ", ".join(
            f"{label} {ratio(figure(measured, a, part, key), figure(measured, b, part, key))}"
            for label, part, key, a, b in RATIOS))


# (label, part, figure, numerator, denominator): each "how many times better ours is".
RATIOS = (
    ("plain req/s", "model", "rps", "ours", "serve"),
    ("batched req/s", "batched", "rps", "ours", "serve"),
    ("handle p50 (Serve's / ours)", "handles", "p50_ms", "serve", "ours"),
    ("handle calls/s", "handles", "concurrent_calls_per_s", "ours", "serve"),
    ("stream TTFB (Serve's / ours)", "stream", "ttfb_p50_ms", "serve", "ours"),
    ("stream chunks/s", "stream", "chunks_per_s", "ours", "serve"),
)


def main() -> int:
    parser = results.parser(__doc__.splitlines()[0])
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per wrk run")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--streams", type=int, default=STREAMS)
    parser.add_argument("--serve-proxy", action="store_true", help="Serve through its Python proxy")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args)))
        return 0
    if args.tiny:
        args.duration, args.warmup, args.streams = 1.0, 0.0, 2
    asked = args.systems.split(",")
    chosen = [s for s in asked if s != "serve" or serve_measured("serving", args.tiny)]
    measured, failures = {}, {}
    for system in chosen:
        print(f"measuring {system} ...", file=sys.stderr, flush=True)
        try:
            measured[system] = in_subprocess(system, args)
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            failures[system] = str(error)
            print(f"  {system} failed: {error}", file=sys.stderr)
    if "serve" in asked and not serve_installed():
        print("Ray Serve is not installed (`pip install -e '.[bench]'`): ours only.")
    print_figures(measured)
    results.write(args.json, "serving", args.tiny, {
        "systems": measured, "failures": failures, "ratios": {
            label: figure(measured, a, part, key) / figure(measured, b, part, key)  # type: ignore[operator]  # figure() is None only for a system that did not run
            for label, part, key, a, b in RATIOS
            if figure(measured, a, part, key) and figure(measured, b, part, key)}, "serve_direct_ingress": not args.serve_proxy,
        "connections": CONNECTIONS, "dim": serving_apps.DIM, "max_batch_size": serving_apps.MAX_BATCH,
        "handle_calls": serving_apps.CALLS, "stream_chunks": serving_apps.CHUNKS,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
