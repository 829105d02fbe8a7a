"""HTTP proxy throughput and latency against Ray Serve and the two natural limits.

One noop replica behind each target, the same load generator for all (wrk,
32 connections, 10 s after a short warm-up):

- ours: `proxy.actor.ProxyActor` fed by a static long-poll controller;
- serve-100: Ray Serve with `max_ongoing_requests=100`;
- serve-default: Ray Serve with its defaults;
- uvicorn: a bare uvicorn hello world (the HTTP limit);
- forwarder: uvicorn in an async actor making one Ray call per request (the
  Ray-call limit).

Every target runs in its own subprocess with its own local Ray, so Serve's
global state cannot leak into the others. Prints req/s, p50, p99 and our
ratios; never asserts on time.

    python bench/proxy.py [--duration 10] [--connections 32] [--only ours,forwarder]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__" and Path(sys.path[0]).resolve() == ROOT / "bench":
    # Run as a script, this file's folder would shadow the `proxy` package.
    sys.path[0] = str(ROOT)
TARGETS = ("ours", "forwarder", "uvicorn", "serve-100", "serve-default")
NOOP_PATH = "bench.proxy:noop"


async def noop(request: Any) -> str:
    """The user code of every target's replica."""
    return "ok"


# --- load generation --------------------------------------------------------------

_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def run_wrk(url: str, duration_s: int, connections: int) -> dict[str, float]:
    threads = f"-t{min(2, connections)}"  # wrk needs a connection per thread
    subprocess.run(["wrk", threads, f"-c{connections}", "-d2s", url], capture_output=True, check=True)
    done = subprocess.run(
        ["wrk", threads, f"-c{connections}", f"-d{duration_s}s", "--latency", url],
        capture_output=True, text=True, check=True,
    )
    return parse_wrk(done.stdout)


def parse_wrk(text: str) -> dict[str, float]:
    def latency(percent: str) -> float:
        match = re.search(rf"^\s+{percent}%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
        return float(match.group(1)) * _UNITS[match.group(2)] if match else float("nan")

    rps = re.search(r"Requests/sec:\s+([\d.]+)", text)
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    return {
        "rps": float(rps.group(1)) if rps else 0.0,
        "p50_ms": latency("50"),
        "p99_ms": latency("99"),
        "non_2xx": float(errors.group(1)) if errors else 0.0,
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_http(url: str, timeout_s: float = 60.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} never answered 200")


# --- targets ---------------------------------------------------------------------------


def start_noop_replica() -> Any:
    import ray

    from replica.host import Replica

    handle = ray.remote(Replica).options(num_cpus=0).remote("noop", "noop-0", "v", NOOP_PATH)
    ray.get(handle.initialize.remote())
    return handle


class StaticController:
    """Answers the proxy's long poll with one fixed configuration."""

    def __init__(self, values: dict[str, Any]) -> None:
        self._values = {key: (1, value) for key, value in values.items()}

    async def listen_for_change(self, keys: dict[str, int], proxy_id: str = "") -> dict[str, Any]:
        changed = {k: v for k, v in self._values.items() if k in keys and keys[k] != v[0]}
        if not changed:
            await asyncio.sleep(30)
        return changed

    async def report_load(self, proxy_id: str, loads: dict[str, Any]) -> None:
        pass


def target_ours(duration_s: int, connections: int) -> dict[str, float]:
    import ray

    from vocabulary.configs import EndpointConfig, ReplicaInfo, ReplicaSet, RouteEntry, RouteTable
    from proxy.actor import ProxyActor
    from proxy.settings import ProxySettings

    replica = start_noop_replica()
    values = {
        "routes": RouteTable(entries=(RouteEntry(route="/", methods=("GET",), endpoint="noop"),)),
        "endpoint:noop": EndpointConfig(name="noop", route="/", methods=("GET",), traffic={"noop": 1.0}),
        "replicas:noop": ReplicaSet(
            backend="noop", max_concurrent_queries=100,
            replicas=(ReplicaInfo(replica_id="noop-0", actor_name="noop-0", handle=replica),),
        ),
    }
    # Held in a local: a named actor without references is collected.
    controller = ray.remote(StaticController).options(name="bench-controller", num_cpus=0).remote(values)
    settings = ProxySettings(max_calls_per_replica=int(os.environ.get("BENCH_MAX_CALLS", "2")))
    proxy = ray.remote(ProxyActor).options(num_cpus=0).remote(
        "bench-controller", ray.get_runtime_context().namespace, "bench", "127.0.0.1", 0, settings
    )
    url = "http://" + ray.get(proxy.ready.remote()) + "/"
    wait_for_http(url)
    result = run_wrk(url, duration_s, connections)
    ray.kill(controller)
    return result


class ForwardApp:
    """One `handle_request` call per request, nothing else."""

    def __init__(self, replica: Any) -> None:
        self._replica = replica

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        message = await receive()
        wire = (scope["method"], scope["path"], scope["query_string"], scope["headers"], message.get("body", b""))
        status, headers, body = await self._replica.handle_request.remote(wire)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class Forwarder:
    """`ForwardApp` under uvicorn in an async actor, set up like our proxy."""

    def __init__(self, replica: Any, port: int) -> None:
        import uvicorn

        config = uvicorn.Config(ForwardApp(replica), host="127.0.0.1", port=port, lifespan="off", loop="none",
                                interface="asgi3", http="httptools", log_config=None, access_log=False)
        self._server = uvicorn.Server(config)
        asyncio.get_event_loop().create_task(self._server.serve())

    async def ready(self) -> bool:
        while not self._server.started:
            await asyncio.sleep(0.01)
        return True


def target_forwarder(duration_s: int, connections: int) -> dict[str, float]:
    import ray

    replica = start_noop_replica()
    port = free_port()
    forwarder = ray.remote(Forwarder).options(num_cpus=0).remote(replica, port)
    ray.get(forwarder.ready.remote())
    url = f"http://127.0.0.1:{port}/"
    wait_for_http(url)
    return run_wrk(url, duration_s, connections)


_HELLO = """
import uvicorn
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})
uvicorn.run(app, host="127.0.0.1", port=%d, log_level="warning", access_log=False, http="httptools")
"""


def target_uvicorn(duration_s: int, connections: int) -> dict[str, float]:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", _HELLO % port])
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_for_http(url)
        return run_wrk(url, duration_s, connections)
    finally:
        server.terminate()
        server.wait()


def target_serve(duration_s: int, connections: int, max_ongoing: int | None) -> dict[str, float]:
    from ray import serve

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    options = {} if max_ongoing is None else {"max_ongoing_requests": max_ongoing}

    @serve.deployment(**options)
    class Noop:
        async def __call__(self, request: Any) -> str:
            return "ok"

    serve.run(Noop.bind(), route_prefix="/")
    url = f"http://127.0.0.1:{port}/"
    wait_for_http(url)
    try:
        return run_wrk(url, duration_s, connections)
    finally:
        serve.shutdown()


def run_target(name: str, duration_s: int, connections: int) -> dict[str, float]:
    if name == "uvicorn":
        return target_uvicorn(duration_s, connections)
    from controller.cluster import init_ray, shutdown_ray

    init_ray()
    try:
        if name == "ours":
            return target_ours(duration_s, connections)
        if name == "forwarder":
            return target_forwarder(duration_s, connections)
        if name == "serve-100":
            return target_serve(duration_s, connections, 100)
        return target_serve(duration_s, connections, None)
    finally:
        shutdown_ray()


# --- the driver ------------------------------------------------------------------------------


def measure_in_subprocess(name: str, duration_s: int, connections: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, __file__, "--target", name, "--duration", str(duration_s), "--connections", str(connections)],
        capture_output=True, text=True, env=env, cwd=ROOT,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = "\n".join(done.stderr.splitlines()[-15:])
        raise RuntimeError(f"target {name} failed (exit {done.returncode}):\n{tail}")
    return json.loads(lines[-1])


def report(results: dict[str, dict[str, float]]) -> None:
    print(f"{'target':<15}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'non-2xx':>10}")
    for name, r in results.items():
        print(f"{name:<15}{r['rps']:>10.0f}{r['p50_ms']:>10.2f}{r['p99_ms']:>10.2f}{r['non_2xx']:>10.0f}")
    ours = results.get("ours")
    if not ours:
        return
    print()
    for name, r in results.items():
        if name == "ours" or not r["rps"]:
            continue
        print(f"ours vs {name:<14} throughput x{ours['rps'] / r['rps']:.2f}   p99 x{ours['p99_ms'] / r['p99_ms']:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--only", default=",".join(TARGETS))
    parser.add_argument("--target", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.target:
        print(json.dumps(run_target(args.target, args.duration, args.connections)))
        return 0
    results: dict[str, dict[str, float]] = {}
    for name in args.only.split(","):
        print(f"measuring {name} ...", file=sys.stderr, flush=True)
        results[name] = measure_in_subprocess(name, args.duration, args.connections)
    report(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
