"""Where one request's time goes in the proxy and the replica, under load (issue 19, step 1).

One noop replica behind our proxy with one worker (`bench.proxy`'s "ours-1w"
stack, so one process holds every request), loaded by
`wrk` at 32 connections while `py-spy` samples the proxy and the replica
processes. Only the thread holding the GIL is sampled (`--gil`),
so samples are Python CPU time; each stack is put in one stage by its
innermost frame that belongs to one (`classify`, pure). The rest of the CPU
time those processes used (from /proc) ran without the GIL: Ray's C++ core
worker and gRPC threads, its own row. Prints the share of CPU time per stage
as a table; never asserts on time. It also names the modules of ours that
one request crossed (`crossed`: every module of the product's packages seen
in any sample of either process; a module too quick to be sampled even once
is missed, so the figure is a floor). Needs `py-spy` (the `bench` extra).

    python -m bench.proxy_profile [--tiny] [--json PATH] [--duration 10] [--rate 250]
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Iterable

from bench import machine, results, wrk
from bench.proxy import serving

CONNECTIONS = 32

# (stage, pattern on a frame's file as py-spy prints it, relative to its
# sys.path entry), most specific first: a stack's innermost frame matching
# one names its stage. Frames matching none (asyncio, the stdlib) are
# passed over towards the caller.
STAGES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("metrics", re.compile(r"^prometheus_client/|^proxy/observability/(metrics|request_stats)\.py"
                           r"|^proxy/shell/load_reporting\.py|^proxy/pipeline/stages/count\.py")),
    ("replica: user code", re.compile(r"^bench/proxy_apps\.py")),
    ("data path: frames over the Unix socket", re.compile(r"^proxy/pool/socketcalls\.py|^datalink/"
                                                          r"|^replica/data_socket\.py|^pickle")),
    ("replica: host (Request in, response out)", re.compile(r"^replica/|^starlette/")),
    ("proxy: routing and choice", re.compile(r"^proxy/routes/(routing|snapshot|steering)\.py"
                                                     r"|^proxy/pool/replicas\.py|^proxy/pipeline/stages/steer\.py|^vocabulary/request_path/(choosing|policies)\.py")),
    ("Ray: call submit", re.compile(r"^ray/actor\.py|^ray/_private/(auto_init_hook|client_mode_hook|signature)\.py"
                                    r"|^ray/util/tracing/")),
    ("Ray: transport (task loop, serialise, deliver)", re.compile(r"^ray/|_raylet|^cloudpickle/|^msgpack")),
    ("proxy: request path (proxy.app, calls, coalescing)",
     re.compile(r"^proxy/(app|pipeline/(?:stages/)?\w+|pool/(calling|sending|replica_calls|coalescing|gathering)|shell/raycalls)\.py")),
    ("HTTP: parse and framework (httpedge.server, httptools)",
     re.compile(r"^httpedge/|^uvicorn/|^httptools/|^h11/|^proxy/actor\.py")),
)
# The product's packages, as py-spy prints a frame's file.
OURS = re.compile(r"^(?:vocabulary|httpedge|datalink|telemetry|gitops|controller|proxy|replica)/[\w/]+\.py$")
EVENT_LOOP = "event loop (asyncio/uvloop: scheduling, socket I/O)"
NATIVE = "native threads without the GIL (Ray core worker, gRPC)"
_FRAME = re.compile(r"\((?P<file>[^()]*):\d+\)$")


def classify(stack: str) -> str:
    """The stage of one py-spy raw stack (`func (file:line);...`, outermost first)."""
    for frame in reversed(stack.split(";")):
        found = _FRAME.search(frame.strip())
        if found is None:
            continue
        for stage, pattern in STAGES:
            if pattern.search(found["file"]):
                return stage
    return EVENT_LOOP


def tally(raw: Iterable[str]) -> Counter[str]:
    """Samples per stage from py-spy's raw (collapsed) output: `stack count` per line."""
    counts: Counter[str] = Counter()
    for line in raw:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if stack and count.isdigit():
            counts[classify(stack)] += int(count)
    return counts


def crossed(raw: Iterable[str]) -> set[str]:
    """The product's modules (`proxy/app.py`, …) in any stack of py-spy's raw output."""
    found: set[str] = set()
    for line in raw:
        stack = line.rstrip("\n").rpartition(" ")[0]
        for frame in stack.split(";"):
            file = _FRAME.search(frame.strip())
            if file is not None and OURS.match(file["file"]):
                found.add(file["file"])
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of every thread of `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def py_spy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return shutil.which("py-spy") or (str(beside) if beside.exists() else None)


def profile(spy: str, duration_s: float, rate: int, keep: Path | None = None) -> dict[str, object]:
    """Figures of one profiled run; `keep` is where py-spy's raw stacks are copied to, if anywhere."""
    with serving("ours-1w", "noop") as urls, tempfile.TemporaryDirectory() as tmp:
        wrk.run(urls[0], 2, CONNECTIONS, 0)  # warm up
        pids = {"proxy": machine.find(os.getpid(), "ray::ProxyActor")[0],
                "replica": machine.find(os.getpid(), "ray::Replica")[0]}
        cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        load: dict[str, float] = {}
        loader = threading.Thread(target=lambda: load.update(wrk.run(urls[0], duration_s, CONNECTIONS, 0)))
        loader.start()
        spies = {name: subprocess.Popen([spy, "record", "--pid", str(pid), "--duration", str(int(duration_s)),
                                         "--rate", str(rate), "--format", "raw", "--nonblocking", "--gil",
                                         "--output", f"{tmp}/{name}.txt"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for name, pid in pids.items()}
        for name, spy_process in spies.items():
            if spy_process.wait(duration_s + 60) != 0:
                said = spy_process.stderr.read().strip() if spy_process.stderr else ""
                raise RuntimeError(f"py-spy on the {name}: {said}")
        loader.join()
        cpu = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in pids.items()}
        raw = {name: Path(f"{tmp}/{name}.txt").read_text().splitlines() for name in pids}
        samples = {name: tally(lines) for name, lines in raw.items()}
        modules = {name: sorted(crossed(lines)) for name, lines in raw.items()}
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            for name in pids:
                shutil.copy(f"{tmp}/{name}.txt", keep / f"{name}.txt")
    return {"load": load, "cpu_s": cpu, "rate": rate, "duration_s": duration_s, "crossed": modules,
            "seconds": {name: _seconds(counts, rate, cpu[name]) for name, counts in samples.items()}}


def _seconds(counts: Counter[str], rate: int, cpu_s: float) -> dict[str, float]:
    """CPU seconds per stage; what py-spy did not see as Python is the native row."""
    seen = {stage: count / rate for stage, count in counts.items()}
    seen[NATIVE] = max(cpu_s - sum(seen.values()), 0.0)
    return seen


def table(seconds: dict[str, dict[str, float]]) -> list[dict[str, object]]:
    """Rows (stage, process, CPU seconds, share of both processes' CPU), largest first."""
    total = sum(sum(by_stage.values()) for by_stage in seconds.values()) or 1.0
    rows = [{"stage": stage, "process": process, "cpu_s": value, "share": value / total}
            for process, by_stage in seconds.items() for stage, value in by_stage.items()]
    return sorted(rows, key=lambda row: -float(row["cpu_s"]))  # type: ignore[arg-type]  # a row's values are str or float


def main() -> int:
    parser = results.parser(__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--raw", type=Path, help="keep py-spy's raw stacks (proxy.txt, replica.txt) here")
    args = parser.parse_args()
    if args.tiny:
        args.duration = 2.0
    spy = py_spy()
    if spy is None:
        print("skipped: py-spy is not installed (`pip install -e '.[bench]'`)")
        results.write(args.json, "proxy_profile", args.tiny, {"skipped": "py-spy is not installed"})
        return 0
    measured = profile(spy, args.duration, args.rate, args.raw)
    rows = table(measured["seconds"])  # type: ignore[arg-type]  # profile() returns loosely typed JSON
    load = measured["load"]
    requests = float(load["rps"]) * args.duration  # type: ignore[index]  # profile() returns loosely typed JSON
    print(f"{load['rps']:.0f} req/s at {CONNECTIONS} connections, p99 {load['p99_ms']:.1f} ms; "  # type: ignore[index]  # profile() returns loosely typed JSON
          f"CPU: proxy {measured['cpu_s']['proxy']:.1f} s, replica {measured['cpu_s']['replica']:.1f} s "  # type: ignore[index]  # profile() returns loosely typed JSON
          f"in {args.duration:.0f} s")
    print(f"{'stage':<58}{'process':<9}{'share':>7}{'µs/request':>12}")
    for row in rows:
        per_request = float(row["cpu_s"]) / requests * 1e6 if requests else float("nan")  # type: ignore[arg-type]  # a row's values are str or float
        print(f"{row['stage']:<58}{row['process']:<9}{float(row['share']):>7.1%}{per_request:>12.1f}")  # type: ignore[arg-type]  # a row's values are str or float
    modules: dict[str, list[str]] = measured["crossed"]  # type: ignore[assignment]  # profile() returns loosely typed JSON
    for process, names in modules.items():
        print(f"modules of ours crossed in the {process}: {len(names)}: {', '.join(names)}")
    print(f"modules of ours one request crosses: {len({n for names in modules.values() for n in names})}")
    results.write(args.json, "proxy_profile", args.tiny, {**measured, "rows": rows, "connections": CONNECTIONS})
    return 0


if __name__ == "__main__":
    sys.exit(main())
