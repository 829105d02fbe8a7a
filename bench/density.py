"""Measurement: 100 and 300 idle replicas of one small backend on one node (issues 35 and 48).

Ours: one backend (`bench.proxy_apps:noop`, `num_cpus=0`) of `--replicas`
replicas and an endpoint to it, applied through our controller; ready is the
backend's and the endpoint's goals met (every replica initialised and in the
proxy's table). Serve: one deployment of the same handler with as many
replicas (its default configuration: the proxy is not what is measured);
ready is `serve.run` returning (every replica RUNNING). Both from one local
Ray each, in its own process, the clock started once the controller (ours or
Serve's) is up.

The floor under both (`ray-actor`): as many bare Ray actors of one empty
class (`num_cpus=0`), ready once each has answered a call. It is what a Ray
worker holds before a replica imports anything, so neither ours nor Serve can
go below it without putting several replicas in one process.

Each system at each count, the smaller first; a larger count only where the
smaller one's PSS per replica says it fits in `bench.targets.FIT_SHARE` of the node's
memory (on a 24 GB node Serve's 81 MB replicas would need all of it at
300): what does not fit is named, with its arithmetic, not started.

Per system: seconds until all are ready, PSS per replica process (mean, from
/proc/PID/smaps_rollup, read after the stack settled), the proxy's PSS, and
ours' route-table size: the bytes a proxy receives when it subscribes to the
route table, the endpoint and the backend's replica set (pickled, as Ray
sends them).

    python -m bench.density [--tiny] [--json PATH] [--replicas 100,300] [--systems ours,serve,ray-actor]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import pickle
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from functools import partial
from typing import Any, Iterator, cast

from bench import machine, payloads, proxy, results, stacks
from bench.targets import FIT_SHARE

SYSTEMS = ("ours", "serve", "ray-actor")
REPLICAS = (100, 300)
SETTLE_S = 5.0


def pss_mb(pids: list[int]) -> list[float]:
    sizes = []
    for pid in pids:
        try:
            sizes.append(machine.pss_mb(pid))
        except (OSError, ValueError):
            continue
    return sizes


def figures(started: float, ready: float, replicas: list[int], proxies: list[int], wanted: int) -> dict[str, Any]:
    sizes = pss_mb(replicas)
    return {
        "replicas": wanted, "replica_processes": len(sizes), "ready_s": ready - started,
        "replica_pss_mb": sum(sizes) / len(sizes) if sizes else math.nan,
        "replicas_pss_mb": sum(sizes), "proxy_pss_mb": sum(pss_mb(proxies)),
    }


@contextmanager
def own_local_ray() -> Iterator[str]:
    """A local Ray of this process's own, in a fresh namespace (yielded), shut down after."""
    from controller.cluster import init_ray, shutdown_ray

    stacks.own_ray()
    namespace = f"bench-{uuid.uuid4().hex[:6]}"
    init_ray(namespace=namespace)
    try:
        yield namespace
    finally:
        shutdown_ray()


def ours(replicas: int) -> dict[str, Any]:
    with own_local_ray() as namespace:
        return _ours(namespace, replicas)


def _ours(namespace: str, replicas: int) -> dict[str, Any]:
    import ray

    from controller.client import start_or_connect
    from vocabulary.control.goals import GoalState
    from vocabulary.spec.backends import BackendConfig
    from vocabulary.spec.endpoints import EndpointConfig
    from vocabulary.control.goal_api import CONTROLLER_NAME, PROXY_CLASS, LongPollKey

    client = start_or_connect(namespace=namespace, proxy_port=stacks.free_port(), options={"proxy_class": PROXY_CLASS})
    backend = BackendConfig(name="small", version="v1", import_path="bench.proxy_apps:noop", num_replicas=replicas,
                            ray_actor_options={"num_cpus": 0})
    endpoint = EndpointConfig(name="small", route="/", traffic={"small": 1.0})

    async def deploy() -> float:
        await client.get_status()  # the controller answers: the clock starts now
        started = time.perf_counter()
        for goal in (await client.apply_backend(backend), await client.apply_endpoint(endpoint)):
            result = await client.wait_for_goal(goal, 1800)
            if result.state != GoalState.MET:
                raise RuntimeError(f"goal not met: {result}")
        return started

    try:
        started = asyncio.run(deploy())
        ready = time.perf_counter()
        time.sleep(SETTLE_S)
        me = os.getpid()
        got = figures(started, ready, machine.find(me, "ray::Replica"),
                      payloads.with_children(machine.find(me, "ray::ProxyActor")), replicas)
        controller = ray.get_actor(CONTROLLER_NAME, namespace=namespace)
        keys = {LongPollKey.ROUTES: -1, LongPollKey.endpoint("small"): -1, LongPollKey.replicas("small"): -1}
        table = cast(dict[str, Any], ray.get(controller.listen_for_change.remote(keys, "bench-density")))
        got["route_table_bytes"] = len(pickle.dumps(table))
        got["route_table_keys"] = len(table)
        return got
    finally:
        client.shutdown()


def serve(replicas: int) -> dict[str, Any]:
    with own_local_ray():
        return _serve(replicas)


def _serve(replicas: int) -> dict[str, Any]:
    from ray import serve as ray_serve

    from bench.proxy_apps import serve_deployment

    port = stacks.free_port()
    ray_serve.start(http_options={"host": "127.0.0.1", "port": port})
    app = serve_deployment("noop").options(num_replicas=replicas, ray_actor_options={"num_cpus": 0},
                                           logging_config={"enable_access_log": False}).bind("noop")
    try:
        started = time.perf_counter()
        ray_serve.run(app, route_prefix="/")
        ready = time.perf_counter()
        time.sleep(SETTLE_S)
        me = os.getpid()
        got = figures(started, ready, machine.find(me, "ray::ServeReplica"), machine.find(me, "ray::ProxyActor"),
                      replicas)
        got["route_table_bytes"] = math.nan
        return got
    finally:
        ray_serve.shutdown()
        proxy.kill_haproxy(port)


def ray_actors(replicas: int) -> dict[str, Any]:
    import ray

    class Empty:
        def ready(self) -> bool:
            return True

    with own_local_ray():
        started = time.perf_counter()
        actors = [ray.remote(num_cpus=0)(Empty).remote() for _ in range(replicas)]
        ray.get([actor.ready.remote() for actor in actors], timeout=1800)  # type: ignore[attr-defined]
        ready = time.perf_counter()
        time.sleep(SETTLE_S)
        got = figures(started, ready, machine.find(os.getpid(), "ray::Empty"), [], replicas)
        got["route_table_bytes"] = math.nan
        return got


CHILDREN = {"ours": ours, "serve": serve, "ray-actor": ray_actors}


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'system':<8}{'replicas':>9}{'ready s':>9}{'PSS MB/replica':>16}{'proxy PSS MB':>14}{'route table B':>15}")
    for r in rows:
        print(f"{r['system']:<8}{r['replicas']:>9}{r['ready_s']:>9.1f}{r['replica_pss_mb']:>16.1f}"
              f"{r['proxy_pss_mb']:>14.1f}{r['route_table_bytes']:>15,.0f}")


def main() -> int:
    parser = results.parser(__doc__.splitlines()[0])
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--replicas", default=",".join(map(str, REPLICAS)), help="counts, comma-separated")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tiny:
        args.systems, args.replicas = "ours", "3"
    counts = sorted(int(c) for c in str(args.replicas).split(","))
    if args.child:
        got = CHILDREN[args.child](counts[0])
        print(json.dumps([{"system": args.child, **got}]))
        return 0
    chosen = [s for s in args.systems.split(",") if s != "serve" or stacks.serve_installed()]
    rows: list[dict[str, Any]] = []
    failures: dict[str, str] = {}
    unfit: dict[str, str] = {}
    memory_mb = cast(float, machine.describe()["memory_gb"]) * 1024
    for system in chosen:
        measured: dict[str, Any] | None = None
        for count in counts:
            needed_mb = measured["replica_pss_mb"] * count if measured else 0.0
            if measured and needed_mb > FIT_SHARE * memory_mb:
                unfit[f"{system} at {count}"] = (f"{count} × {measured['replica_pss_mb']:.1f} MB (its PSS per replica at "
                                                 f"{measured['replicas']}) = {needed_mb / 1024:.1f} GB, above "
                                                 f"{FIT_SHARE:.0%} of the node's {memory_mb / 1024:.1f} GB")
                print(f"  {system} at {count}: not started, {unfit[f'{system} at {count}']}", file=sys.stderr)
                break
            print(f"measuring {system} at {count} ...", file=sys.stderr, flush=True)
            try:
                at_count = proxy.once_or_twice(partial(proxy.run_child, "bench.density", system,
                                                       ["--replicas", str(count)], 2400), system)
            except (RuntimeError, subprocess.TimeoutExpired) as error:
                failures[f"{system} at {count}"] = str(error)
                print(f"  {system} at {count} failed: {error}", file=sys.stderr)
                break
            rows.extend(at_count)
            measured = at_count[0]
    print_table(rows)
    results.write(args.json, "density", args.tiny, {
        "runs": rows, "failures": failures, "unfit": unfit, "replicas": counts,
        "load_average": machine.describe()["load_average_1m"],
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
