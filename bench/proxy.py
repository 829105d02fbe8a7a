"""Measurements 1 and 2: HTTP req/s, p50 and p99 through each system, by connections.

The same user code (`bench.proxy_apps`: noop on one replica; a 5 ms async
and a 5 ms CPU-bound handler on two) behind every system, loaded by `wrk`
on loopback at 1, 8, 32 and 128 connections:

- ours: `gitops`' controller starts the proxy and the replicas, as for a user
  (its default proxy workers per node); ours-1w: the same with one proxy worker;
  ours-observed (asked for by name, never by default): ours with every request
  captured (`[capture] sample = 1.0` to a temporary directory) and shadowed to a
  second backend of the same handler, compared byte for byte (`exact`);
- forwarder: uvicorn in an async actor making one Ray call per request;
- serve-default / serve-100: Ray Serve through its Python proxy, with its
  defaults and with `max_ongoing_requests=100`;
- serve-direct: `RAY_SERVE_ENABLE_DIRECT_INGRESS=1`, each replica serves HTTP
  itself (with two replicas the connections are split between their ports,
  the best a client-side balancer could do);
- serve-haproxy: `RAY_SERVE_ENABLE_HA_PROXY=1`, Serve's bundled HAProxy in front;
- uvicorn / granian: Starlette answering directly, no Ray (one worker per
  replica): the limit of an ordinary Python web app here;
- raw: asyncio.Protocol + httptools on uvloop (noop only): the ceiling of one
  Python process.

Serve runs with its access log off. Every (system, handler) runs in its own
subprocess with its own local Ray, so nothing leaks between them; each
connection level is warmed up once, then measured `--repeats` times.

    python -m bench.proxy [--tiny] [--json PATH] [--systems ours,serve-direct] [--handlers noop]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:
    from ray.actor import ActorHandle

from bench import machine, results, stats, wrk
from bench.stacks import free_port, own_ray, serve_installed, serve_measured
from bench.proxy_apps import CONCURRENCY, HANDLERS, REPLICAS

ROOT = Path(__file__).resolve().parent.parent
SYSTEMS = (
    "ours", "ours-1w", "forwarder", "serve-default", "serve-100", "serve-direct", "serve-haproxy", "uvicorn", "granian", "raw",
)
# With a 5 ms handler the questions are coalescing and starvation, not the framework's limit.
SLOW_HANDLER_SYSTEMS = ("ours", "ours-1w", "forwarder", "serve-100", "serve-direct", "serve-haproxy", "uvicorn")
SERVE_SYSTEMS = ("serve-default", "serve-100", "serve-direct", "serve-haproxy")
CONNECTIONS = (1, 8, 32, 128)
# Ours as the benchmarks configure it: room for bench.streams' 5,000 open streams
# per worker, and bench.payloads' 16 MiB bodies (the defaults are 4,096 and 10 MiB).
MAX_CONNECTIONS = 10_000
MAX_BODY_BYTES = 32 * 1024 * 1024
SERVE_ENV = {
    "serve-direct": {"RAY_SERVE_ENABLE_DIRECT_INGRESS": "1"},
    "serve-haproxy": {"RAY_SERVE_ENABLE_HA_PROXY": "1"},
}


def systems_for(handler: str, chosen: tuple[str, ...], tiny: bool = False) -> list[str]:
    allowed = SYSTEMS if handler == "noop" else SLOW_HANDLER_SYSTEMS
    return [s for s in chosen if s in allowed and (s not in SERVE_SYSTEMS or serve_measured("proxy", tiny))]


# --- the systems (each in the child process) --------------------------------------------


@contextlib.contextmanager
def serving(system: str, handler: str) -> Iterator[list[str]]:
    """Run `system` with `handler`; yield the URLs to load (more than one: split the connections)."""
    replicas = REPLICAS[handler]
    if system in ("uvicorn", "granian", "raw"):
        with _process_server(system, handler, replicas) as urls:
            yield urls
        return
    from controller.cluster import init_ray, shutdown_ray

    own_ray()
    init_ray(namespace=f"bench-{uuid.uuid4().hex[:6]}")
    try:
        if system in ("ours", "ours-1w", "ours-observed"):
            with _ours(handler, replicas, 1 if system == "ours-1w" else None, system == "ours-observed") as urls:
                yield urls
        elif system == "forwarder":
            with _forwarder(handler, replicas) as urls:
                yield urls
        else:
            with serve_app(system, handler, replicas) as urls:
                yield urls
    finally:
        shutdown_ray()


def probe(url: str, handler: str) -> str:
    """What to GET to see `handler` answer at `url`: an SSE stream of no events, not one of 30 s."""
    return f"{url}?seconds=0" if handler == "sse" else url


@contextlib.contextmanager
def _ours(handler: str, replicas: int, proxy_workers: int | None, observed: bool = False) -> Iterator[list[str]]:
    """`proxy_workers` None: the controller's default (the node's cores, capped); `observed`:
    every request captured and shadowed to a second backend, compared byte for byte."""
    import tempfile

    from controller.client import start_or_connect
    from vocabulary.control.goals import GoalState
    from vocabulary.spec.backends import BackendConfig
    from vocabulary.spec.endpoints import CaptureConfig, EndpointConfig, ShadowCompare
    from vocabulary.control.goal_api import PROXY_CLASS

    port = free_port()
    options: dict[str, Any] = {"proxy_class": PROXY_CLASS, "proxy_max_connections": MAX_CONNECTIONS}
    if proxy_workers is not None:
        options["proxy_workers"] = proxy_workers
    client = start_or_connect(namespace=f"bench-{uuid.uuid4().hex[:6]}", proxy_port=port, options=options)
    records = tempfile.TemporaryDirectory(prefix="bench-capture-")
    observing: dict[str, Any] = {} if not observed else {
        "capture": CaptureConfig(sample=1.0, sink=f"file://{records.name}"),
        "shadow": {"bench-shadow": 1.0}, "shadow_compare": ShadowCompare.EXACT,
    }

    async def deploy() -> None:
        backends = ["bench", "bench-shadow"] if observed else ["bench"]
        goals = [await client.apply_backend(BackendConfig(
            name=name, version="v1", import_path=f"bench.proxy_apps:{handler}", num_replicas=replicas,
            ray_actor_options={"num_cpus": 0}, max_concurrent_queries=CONCURRENCY.get(handler, 100),
        )) for name in backends]
        goals.append(await client.apply_endpoint(EndpointConfig(
            name="bench", route="/", traffic={"bench": 1.0}, max_body_bytes=MAX_BODY_BYTES, **observing)))
        for goal in goals:
            result = await client.wait_for_goal(goal, 120)
            if result.state != GoalState.MET:
                raise RuntimeError(f"goal not met: {result}")

    try:
        asyncio.run(deploy())
        url = f"http://127.0.0.1:{port}/"
        wrk.wait_for_http(probe(url, handler))
        yield [url]
    finally:
        client.shutdown()
        records.cleanup()


class ForwardApp:
    """One `handle_request` Ray call per request, round robin over the replicas, nothing else."""

    def __init__(self, replicas: list[Any]) -> None:
        self._replicas = itertools.cycle(replicas)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        message = await receive()
        wire = (scope["method"], scope["path"], scope["query_string"], scope["headers"], message.get("body", b""))
        status, headers, body = await next(self._replicas).handle_request.remote(wire)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class Forwarder:
    """`ForwardApp` under uvicorn in an async actor, set up like a proxy actor."""

    def __init__(self, replicas: list[Any], port: int) -> None:
        import uvicorn

        config = uvicorn.Config(ForwardApp(replicas), host="127.0.0.1", port=port, lifespan="off", loop="none",
                                interface="asgi3", http="httptools", log_config=None, access_log=False)
        self._server = uvicorn.Server(config)
        asyncio.get_event_loop().create_task(self._server.serve())

    async def ready(self) -> bool:
        while not self._server.started:
            await asyncio.sleep(0.01)
        return True


def _started(made: object) -> ActorHandle[Any]:
    """What `.remote()` started: Ray types it "a handle or the class itself"; it is a handle."""
    from ray.actor import ActorHandle

    assert isinstance(made, ActorHandle), made
    return made


@contextlib.contextmanager
def _forwarder(handler: str, replicas: int) -> Iterator[list[str]]:
    import ray

    from replica.host import Replica
    from vocabulary.spec.backends import BackendConfig

    handles = [_started(ray.remote(Replica).options(num_cpus=0).remote(
        BackendConfig(name="bench", version="v1", import_path=f"bench.proxy_apps:{handler}"), f"bench-{i}"))
               for i in range(replicas)]
    ray.get([h.initialize.remote() for h in handles])
    port = free_port()
    forwarder = _started(ray.remote(Forwarder).options(num_cpus=0).remote(handles, port))
    ray.get(forwarder.ready.remote())
    url = f"http://127.0.0.1:{port}/"
    wrk.wait_for_http(probe(url, handler))
    yield [url]


@contextlib.contextmanager
def serve_app(system: str, handler: str, replicas: int, port: int | None = None) -> Iterator[list[str]]:
    """A Serve application of `handler` in the configuration `system`; HAProxy is killed after."""
    import ray
    from ray import serve

    from bench.proxy_apps import serve_deployment

    port = port or free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    options: dict[str, Any] = {"num_replicas": replicas, "logging_config": {"enable_access_log": False}}
    if system != "serve-default":
        options["max_ongoing_requests"] = CONCURRENCY.get(handler, 100)
    serve.run(serve_deployment(handler).options(**options).bind(handler), route_prefix="/")
    try:
        if system == "serve-direct":
            controller = ray.get_actor("SERVE_CONTROLLER_ACTOR", namespace="serve")
            urls = wait_for_targets(controller, replicas)
        else:
            urls = [f"http://127.0.0.1:{port}/"]
        for url in urls:
            wrk.wait_for_http(probe(url, handler))
        yield urls
    finally:
        serve.shutdown()
        kill_haproxy(port)


def wait_for_targets(controller: Any, replicas: int, timeout_s: float = 60) -> list[str]:
    """The replicas' own HTTP ports once all `replicas` serve (direct ingress)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        urls = direct_targets(controller)
        if len(urls) == replicas and all(":8000/" not in u for u in urls):
            return urls
        time.sleep(0.2)
    raise RuntimeError("Serve never reported its direct-ingress replica ports")


def direct_targets(controller: Any) -> list[str]:
    """The HTTP targets Serve reports now (direct ingress: the replicas' own ports)."""
    import ray

    # The replicas listen on loopback (http_options.host); Serve reports the node's address.
    return sorted({f"http://127.0.0.1:{t.port}/" for group in ray.get(controller.get_target_groups.remote())
                   if group.protocol == "HTTP" for t in group.targets})


def kill_haproxy(port: int) -> None:
    """Serve's HAProxy outlives the driver and keeps the port: end the one on ours."""
    for pid in machine.listener_pids(port):
        if "haproxy" in machine.command_line(pid):
            machine.kill9(pid)


@contextlib.contextmanager
def _process_server(system: str, handler: str, replicas: int) -> Iterator[list[str]]:
    port = free_port()
    app = "bench.proxy_apps:starlette_app"
    commands = {
        "uvicorn": [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port),
                    "--workers", str(replicas), "--http", "httptools", "--loop", "uvloop",
                    "--no-access-log", "--log-level", "warning"],
        "granian": [sys.executable, "-m", "granian", "--interface", "asgi", "--host", "127.0.0.1", "--port",
                    str(port), "--workers", str(replicas), "--no-access-log", "--log-level", "warning", app],
        "raw": [sys.executable, "-c", f"from bench.proxy_apps import serve_raw; serve_raw({port})"],
    }
    server = subprocess.Popen(commands[system], cwd=ROOT, env={**os.environ, "BENCH_HANDLER": handler})
    try:
        url = f"http://127.0.0.1:{port}/"
        wrk.wait_for_http(probe(url, handler), timeout_s=30)
        yield [url]
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


# --- measuring -------------------------------------------------------------------------------------


def load(urls: list[str], duration_s: float, connections: int, warmup_s: float) -> dict[str, float]:
    """wrk against one URL, or split across several at once (summed req/s, worst p99), with
    the cores the machine kept busy meanwhile (`busy_cores`) and wrk's share of them (`wrk_cores`)."""
    split = urls if len(urls) > 1 and connections >= len(urls) else urls[:1]
    share = connections // len(split)
    with ThreadPoolExecutor(len(split)) as pool:
        if warmup_s > 0:
            list(pool.map(lambda u: wrk.warm_up(u, warmup_s, share), split))
        with machine.cpu_used() as cpu:
            parts = list(pool.map(lambda u: wrk.run(u, duration_s, share, 0), split))
    return {
        "rps": sum(p["rps"] for p in parts),
        "p50_ms": sum(p["p50_ms"] for p in parts) / len(parts),
        "p99_ms": max(p["p99_ms"] for p in parts),
        "non_2xx": sum(p["non_2xx"] for p in parts),
        "socket_errors": sum(p["socket_errors"] for p in parts),
        "busy_cores": cpu["busy_cores"],
        "wrk_cores": cpu["children_cores"],
    }


def measure(system: str, handler: str, connections: tuple[int, ...], duration_s: float, repeats: int,
            warmup_s: float) -> list[dict[str, Any]]:
    """Every connection level of one system: the spread of `repeats` runs each."""
    rows = []
    with serving(system, handler) as urls:
        for count in connections:
            samples = [load(urls, duration_s, count, warmup_s if i == 0 else 0) for i in range(repeats)]
            rows.append({
                "system": system, "handler": handler, "replicas": REPLICAS[handler], "connections": count,
                "rps": stats.spread(s["rps"] for s in samples),
                "p50_ms": stats.spread(s["p50_ms"] for s in samples),
                "p99_ms": stats.spread(s["p99_ms"] for s in samples),
                "non_2xx": sum(s["non_2xx"] for s in samples),
                "socket_errors": sum(s["socket_errors"] for s in samples),
                "busy_cores": stats.spread(s["busy_cores"] for s in samples),
                "wrk_cores": stats.spread(s["wrk_cores"] for s in samples),
            })
    return rows


def in_subprocess(system: str, handler: str, args: Any) -> list[dict[str, Any]]:
    return run_child("bench.proxy", system, [
        "--handlers", handler, "--connections", ",".join(map(str, args.connections)), "--duration", str(args.duration),
        "--repeats", str(args.repeats), "--warmup", str(args.warmup)])


def run_child(module: str, system: str, arguments: list[str], timeout_s: float = 480) -> list[dict[str, Any]]:
    """`python -m module --child system arguments...` with the system's Serve environment; the JSON
    list it prints last (each system in its own process, with its own local Ray)."""
    env = {**os.environ, **SERVE_ENV.get(system, {}),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", module, "--child", system, *arguments]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout_s)
    lines = [line for line in done.stdout.splitlines() if line.startswith("[")]
    if done.returncode != 0 or not lines:
        tail = "\n".join(done.stderr.strip().splitlines()[-6:])
        raise RuntimeError(f"exit {done.returncode}: {tail}")
    return json.loads(lines[-1])


def measured_once_or_twice(system: str, handler: str, args: Any) -> list[dict[str, Any]]:
    return once_or_twice(lambda: in_subprocess(system, handler, args), f"{system} / {handler}")


def once_or_twice(measure: Callable[[], list[dict[str, Any]]], label: str) -> list[dict[str, Any]]:
    """A local Ray may fail to start on a busy machine: one more try before it counts as failed."""
    try:
        return measure()
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        print(f"  {label} failed, once more: {str(error).splitlines()[-1]}", file=sys.stderr)
        return measure()


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'handler':<8}{'system':<15}{'conns':>6}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'non-2xx':>9}")
    for r in rows:
        print(f"{r['handler']:<8}{r['system']:<15}{r['connections']:>6}{r['rps']['median']:>10.0f}"
              f"{r['p50_ms']['median']:>9.2f}{r['p99_ms']['median']:>9.2f}{r['non_2xx'] + r['socket_errors']:>9.0f}")


def ratio_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every system's req/s and p99 as ratios to Serve's fastest configuration
    and to the raw ceiling (req/s only) at the same handler and connections."""
    def median(row: dict[str, Any], key: str) -> float:
        return row[key]["median"]

    out = []
    for row in rows:
        peers = [r for r in rows if r["handler"] == row["handler"] and r["connections"] == row["connections"]]
        serve = max((r for r in peers if r["system"] in SERVE_SYSTEMS), key=lambda r: median(r, "rps"), default=None)
        raw = next((r for r in peers if r["system"] == "raw"), None)
        out.append({
            "system": row["system"], "handler": row["handler"], "connections": row["connections"],
            "serve_fastest": serve["system"] if serve else None,
            "rps_vs_serve": median(row, "rps") / median(serve, "rps") if serve else None,
            "p99_vs_serve": median(row, "p99_ms") / median(serve, "p99_ms") if serve else None,
            "rps_vs_raw": median(row, "rps") / median(raw, "rps") if raw else None,
        })
    return out


def print_ratios(ratios: list[dict[str, Any]]) -> None:
    def cell(value: float | None) -> str:
        return f"×{value:.2f}" if value is not None else "–"

    print(f"{'handler':<8}{'system':<15}{'conns':>6}{'req/s vs Serve':>16}{'p99 vs Serve':>14}{'req/s vs raw':>14}"
          "  (Serve's fastest)")
    for r in ratios:
        print(f"{r['handler']:<8}{r['system']:<15}{r['connections']:>6}{cell(r['rps_vs_serve']):>16}"
              f"{cell(r['p99_vs_serve']):>14}{cell(r['rps_vs_raw']):>14}  {r['serve_fastest'] or '–'}")


def main() -> int:
    parser = results.parser(__doc__.splitlines()[0])
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--handlers", default=",".join(HANDLERS))
    parser.add_argument("--connections", default=",".join(map(str, CONNECTIONS)))
    parser.add_argument("--duration", type=float, default=2.0, help="seconds per measured run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.connections = tuple(int(c) for c in str(args.connections).split(","))
    if args.child:
        print(json.dumps(measure(args.child, args.handlers, args.connections, args.duration, args.repeats,
                                 args.warmup)))
        return 0
    if args.tiny:
        args.handlers, args.connections, args.duration, args.repeats, args.warmup = "noop", (8,), 1.0, 1, 0.0
        args.systems = "ours,raw,serve-direct"
    rows, failures = [], {}
    for handler in args.handlers.split(","):
        for system in systems_for(handler, tuple(args.systems.split(",")), args.tiny):
            print(f"measuring {system} / {handler} ...", file=sys.stderr, flush=True)
            try:
                rows.extend(measured_once_or_twice(system, handler, args))
            except (RuntimeError, subprocess.TimeoutExpired) as error:
                failures[f"{system}/{handler}"] = str(error)
                print(f"  {system} / {handler} failed: {error}", file=sys.stderr)
    print_table(rows)
    ratios = ratio_rows(rows)
    print_ratios(ratios)
    results.write(args.json, "proxy", args.tiny, {
        "runs": rows, "ratios": ratios, "failures": failures, "serve_installed": serve_installed(),
        "duration_s": args.duration, "repeats": args.repeats,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
