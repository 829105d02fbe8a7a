"""Measurement: request and response bodies through each system, 1 KiB to 16 MiB (issue 35).

Two handlers (`bench.proxy_apps`): `echo` answers the body it got, `consume`
reads it and answers 1 KiB. Each is POSTed bodies of 1 KiB, 64 KiB, 1 MiB
and 16 MiB by `wrk` (a Lua script sets the body) at 1 and 32 connections,
one replica, behind the systems of `bench.proxy` started by its code:

- ours: the proxy and a replica started by our controller; ours-observed
  (asked for by name, never by default): the same with every request captured
  and shadowed, compared byte for byte (`bench.proxy`);
- serve-direct / serve-haproxy: Ray Serve 2.60 at its fastest (direct
  ingress; its bundled HAProxy), `max_ongoing_requests=100`, access log off;
- uvicorn / granian: Starlette answering by itself, no Ray.

Per point: req/s, MB/s (body bytes carried both ways by the requests answered
2xx), p50/p99, and the CPU the proxy and the replica processes spent per MB
carried (ms/MB, from /proc/PID/stat around the measured runs): the proxy is
our ProxyActor, Serve's ProxyActor and its HAProxy; the replica is our
Replica, Serve's ServeReplica, or the uvicorn/granian processes. A point with
non-2xx answers (a body over a system's limit) counts only what was answered.

    python -m bench.payloads [--tiny] [--json PATH] [--systems ours,uvicorn] [--handlers echo] [--sizes 65536]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench import machine, proxy, results, stacks, stats, wrk
from bench.proxy_apps import ANSWER
from controller.cluster import descendants

SYSTEMS = ("ours", "serve-direct", "serve-haproxy", "uvicorn", "granian")
SERVE_SYSTEMS = ("serve-direct", "serve-haproxy")
HANDLERS = ("echo", "consume")
KIB, MIB = 1024, 1024 * 1024
SIZES = (KIB, 64 * KIB, MIB, 16 * MIB)
CONNECTIONS = (1, 32)


def carried_bytes(handler: str, size: int) -> int:
    """Body bytes one request carries, both ways: the request's, and the answer's."""
    return size + (size if handler == "echo" else len(ANSWER))


def size_label(size: int) -> str:
    return f"{size // MIB} MiB" if size >= MIB else f"{size // KIB} KiB"


# --- in the child process, beside the running system ------------------------------------------


def roles(system: str, url: str) -> dict[str, list[int]]:
    """The processes whose CPU counts as the proxy's and as the replica's, in this process's tree."""
    me = os.getpid()
    if system in ("uvicorn", "granian"):
        return {"proxy": [], "replica": sorted(descendants(me))}
    port = urlsplit(url).port or 80
    proxies = machine.find(me, "ray::ProxyActor") + [
        pid for pid in machine.listener_pids(port) if "haproxy" in machine.command_line(pid)]
    replicas = machine.find(me, "ray::Replica") + machine.find(me, "ray::ServeReplica")
    return {"proxy": with_children(proxies), "replica": with_children(replicas)}


def with_children(pids: list[int]) -> list[int]:
    return sorted({p for pid in pids for p in (pid, *descendants(pid))})


def cpu_s(pids: list[int]) -> float:
    return sum(machine.cpu_s(pid) for pid in pids)


def one_run(url: str, handler: str, size: int, connections: int, duration_s: float, warmup_s: float,
            script: Path, pids: dict[str, list[int]]) -> dict[str, float]:
    """One wrk run, with the CPU the proxy and the replica spent during it."""
    if warmup_s > 0:
        wrk.warm_up(url, warmup_s, connections, script)
    before = {role: cpu_s(p) for role, p in pids.items()}
    started = time.monotonic()
    got = wrk.run(url, duration_s, connections, 0, script)
    elapsed = time.monotonic() - started
    answered = max(0.0, got["requests"] - got["non_2xx"])
    mb = answered * carried_bytes(handler, size) / 1e6
    per_mb = {f"{role}_cpu_ms_per_mb": (cpu_s(p) - before[role]) * 1e3 / mb if mb and p else math.nan
              for role, p in pids.items()}
    return {**got, "mb_s": mb / elapsed, "ok_rps": answered / elapsed, **per_mb}


def measure(system: str, handler: str, sizes: tuple[int, ...], connections: tuple[int, ...], duration_s: float,
            repeats: int, warmup_s: float) -> list[dict[str, Any]]:
    rows = []
    with proxy.serving(system, handler) as urls, tempfile.TemporaryDirectory(prefix="bench-payloads-") as tmp:
        url = urls[0]
        pids = roles(system, url)
        for size in sizes:
            script = Path(tmp) / f"post-{size}.lua"
            script.write_text(wrk.post_script(size))
            for count in connections:
                samples = [one_run(url, handler, size, count, duration_s, warmup_s if i == 0 else 0, script, pids)
                           for i in range(repeats)]
                rows.append({
                    "system": system, "handler": handler, "size": size, "connections": count,
                    **{key: stats.spread(s[key] for s in samples)
                       for key in ("ok_rps", "mb_s", "p50_ms", "p99_ms", "proxy_cpu_ms_per_mb",
                                   "replica_cpu_ms_per_mb")},
                    "non_2xx": sum(s["non_2xx"] for s in samples),
                    "socket_errors": sum(s["socket_errors"] for s in samples),
                })
    return rows


# --- in the parent: every system, then the ratios ------------------------------------------------


def ratio_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ours' MB/s against Serve's fastest and the fastest bare Starlette app at each point."""
    def mb_s(row: dict[str, Any] | None) -> float:
        return row["mb_s"]["median"] if row and row["mb_s"]["median"] is not None else math.nan

    out = []
    for row in (r for r in rows if r["system"] == "ours"):
        peers = [r for r in rows if (r["handler"], r["size"], r["connections"])
                 == (row["handler"], row["size"], row["connections"])]
        serve = max((r for r in peers if r["system"] in SERVE_SYSTEMS), key=mb_s, default=None)
        bare = max((r for r in peers if r["system"] in ("uvicorn", "granian")), key=mb_s, default=None)
        uvicorn = next((r for r in peers if r["system"] == "uvicorn"), None)
        out.append({
            "handler": row["handler"], "size": row["size"], "connections": row["connections"],
            "serve_fastest": serve["system"] if serve else None,
            "vs_serve": mb_s(row) / mb_s(serve) if serve and mb_s(serve) else None,
            "vs_uvicorn": mb_s(row) / mb_s(uvicorn) if uvicorn and mb_s(uvicorn) else None,
            "bare_fastest": bare["system"] if bare else None,
            "vs_bare": mb_s(row) / mb_s(bare) if bare and mb_s(bare) else None,
        })
    return out


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'handler':<8}{'system':<14}{'size':>8}{'conns':>6}{'req/s':>9}{'MB/s':>9}{'p50 ms':>9}{'p99 ms':>9}"
          f"{'proxy ms/MB':>12}{'replica ms/MB':>14}{'failed':>8}")
    for r in rows:
        print(f"{r['handler']:<8}{r['system']:<14}{size_label(r['size']):>8}{r['connections']:>6}"
              f"{r['ok_rps']['median']:>9.0f}{r['mb_s']['median']:>9.1f}{r['p50_ms']['median']:>9.2f}"
              f"{r['p99_ms']['median']:>9.2f}{r['proxy_cpu_ms_per_mb']['median']:>12.2f}"
              f"{r['replica_cpu_ms_per_mb']['median']:>14.2f}{r['non_2xx'] + r['socket_errors']:>8.0f}")


def child_arguments(handler: str, args: argparse.Namespace) -> list[str]:
    return ["--handlers", handler, "--sizes", ",".join(map(str, args.sizes)),
            "--connections", ",".join(map(str, args.connections)), "--duration", str(args.duration),
            "--repeats", str(args.repeats), "--warmup", str(args.warmup)]


def main() -> int:
    parser = results.parser(__doc__.splitlines()[0])
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--handlers", default=",".join(HANDLERS))
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="body sizes in bytes")
    parser.add_argument("--connections", default=",".join(map(str, CONNECTIONS)))
    parser.add_argument("--duration", type=float, default=2.0, help="seconds per measured run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tiny:
        args.systems, args.handlers, args.sizes, args.connections = "ours,uvicorn", "echo", str(64 * KIB), "1"
        args.duration, args.repeats, args.warmup = 1.0, 1, 0.0
    args.sizes = tuple(int(s) for s in str(args.sizes).split(","))
    args.connections = tuple(int(c) for c in str(args.connections).split(","))
    if args.child:
        print(json.dumps(measure(args.child, args.handlers, args.sizes, args.connections, args.duration,
                                 args.repeats, args.warmup)))
        return 0
    chosen = [s for s in args.systems.split(",") if s not in SERVE_SYSTEMS or stacks.serve_installed()]
    rows: list[dict[str, Any]] = []
    failures: dict[str, str] = {}
    for handler in args.handlers.split(","):
        for system in chosen:
            print(f"measuring {system} / {handler} ...", file=sys.stderr, flush=True)
            arguments = child_arguments(handler, args)
            try:
                rows.extend(proxy.once_or_twice(partial(proxy.run_child, "bench.payloads", system, arguments, 1800),
                                                f"{system} / {handler}"))
            except (RuntimeError, subprocess.TimeoutExpired) as error:
                failures[f"{system}/{handler}"] = str(error)
                print(f"  {system} / {handler} failed: {error}", file=sys.stderr)
    print_table(rows)
    results.write(args.json, "payloads", args.tiny, {
        "runs": rows, "ratios": ratio_rows(rows), "failures": failures, "serve_installed": stacks.serve_installed(),
        "duration_s": args.duration, "repeats": args.repeats,
        "load_average": machine.describe()["load_average_1m"],
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
