"""The benchmark runner: every measurement, one results file, one report with plots.

    python -m bench.report [--tiny] [--jobs 2] [--out bench/results] [--only proxy,reconcile] [--render-only]

The measurements: `proxy` (HTTP throughput and latency), `update_latency`,
`rollout`, `faults`, `reconcile`, `fanout`, `memory`, `serving`,
`proxy_profile`, issue 35's work users send: `payloads` (bodies of
1 KiB–16 MiB), `streams` (thousands of open SSE streams) and `density`
(100 and 300 idle replicas on one node), issue 29's `models` (fetching into a node's
cache; multiplexing), issue 30's `routing` (routing policies on the LLM
simulator, next to Ray Serve's PrefixCacheAffinityRouter), issue 31's
`audit` (the proxy's throughput with tracing and capture on, against off)
issue 43's `llm_endpoint` (the OpenAI endpoint's TTFT and tokens/s
through our proxy against the same CPU engine served directly) and issue
45's `grpc` (unary noop and v2 ModelInfer calls through our proxy's gRPC
port, against the same servicer on grpcio and Ray Serve's gRPC ingress).

Runs each measurement module (`bench.<name>`) in its own process with
`--json` (one at a time; `--jobs N` runs N at once, for the smoke),
collects their files into `latest.json` (with the machine and the command
of each), and renders `REPORT.md` and the PNG plots from that file alone:
nothing in the report is typed by hand. A measurement that fails is
recorded with its error and the others still run. `--only` re-runs some
measurements and keeps the others of an existing `latest.json`;
`--render-only` re-renders from it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench import machine
from bench.targets import FIT_SHARE, Target, median, targets

ROOT = Path(__file__).resolve().parent.parent
MEASUREMENTS = ("proxy", "update_latency", "rollout", "faults", "reconcile", "fanout", "memory", "serving",
                "proxy_profile", "payloads", "streams", "density", "models", "routing", "audit", "llm_endpoint",
                "grpc")
TIMEOUT_S = {"proxy": 3600, "reconcile": 1800, "payloads": 3600, "streams": 1800, "density": 2400, "models": 1800,
             "routing": 3600, "audit": 1800, "grpc": 1800}
NO_PLOTS = "No plots: matplotlib is not installed here (`pip install -e '.[bench]'`, as `make bench` does)."
NOISE = ("The machine is shared with other work and noisy (see the load average): read the figures as "
         "ratios within this run, not as absolutes.")


def run_all(names: list[str], tiny: bool, out: Path, jobs: int = 1) -> dict[str, Any]:
    """Run every named measurement, `jobs` at a time; returns the combined results document.

    More than one job is for the smoke (`--tiny`): measurements that share the machine disturb
    each other's figures, so a full run keeps the default of one.
    """
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    document: dict[str, Any] = {
        "command": " ".join(["python", "-m", "bench.report", *sys.argv[1:]]),
        "started_at": _now(), "machine": machine.describe(), "measurements": {}, "failures": {},
    }
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        outcomes = list(pool.map(lambda name: _measure(name, tiny, out, env), names))
    for name, figures, error in outcomes:  # in the order asked, whichever finished first
        if error:
            document["failures"][name] = error
        else:
            document["measurements"][name] = figures
    document["finished_at"] = _now()
    document["load_average_end"] = machine.describe()["load_average_1m"]
    return document


def _measure(name: str, tiny: bool, out: Path, env: dict[str, str]) -> tuple[str, dict[str, Any], str]:
    """One measurement's (name, figures, error); its figures carry the wall time it took."""
    path = out / f"{name}.json"
    path.unlink(missing_ok=True)
    shown = os.path.relpath(path.resolve(), ROOT)  # run from ROOT: the report names no machine's paths
    command = [sys.executable, "-m", f"bench.{name}", "--json", shown, *(["--tiny"] if tiny else [])]
    print(f"== bench.{name}", flush=True)
    started = time.monotonic()
    error = _run(command, path, TIMEOUT_S.get(name, 900), env)
    if error:  # a local Ray that did not start on a busy machine: once more
        print(f"   bench.{name} failed, once more: {error.splitlines()[-1] if error else ''}", flush=True)
        error = _run(command, path, TIMEOUT_S.get(name, 900), env)
    if error:
        print(f"   bench.{name} failed: {error}", flush=True)
        return name, {}, error
    figures = {**json.loads(path.read_text()), "wall_s": time.monotonic() - started}
    path.unlink()
    return name, figures, ""


def merged(previous: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """`previous` with the measurements `update` re-ran replaced (each keeps its own command and time)."""
    rerun = set(update["measurements"]) | set(update["failures"])
    return {
        **update,
        "command": f"{previous['command']}, then {update['command']}",
        "started_at": previous["started_at"],
        "measurements": {**{k: v for k, v in previous["measurements"].items() if k not in rerun},
                         **update["measurements"]},
        "failures": {**{k: v for k, v in previous["failures"].items() if k not in rerun}, **update["failures"]},
        "before": update.get("before") or previous.get("before"),
    }


def headline_figures(document: dict[str, Any]) -> dict[str, Any] | None:
    """The proxy headline's req/s per system (noop, 32 connections) and when it was measured: what
    the next run of `bench.proxy` is compared with. None when the document has no proxy run."""
    doc = document["measurements"].get("proxy")
    if not doc:
        return None
    runs = [r for r in doc["figures"]["runs"] if r["handler"] == "noop" and r["connections"] == 32]
    return {"finished_at": doc["finished_at"], "rps": {r["system"]: r["rps"] for r in runs}}


def with_before(document: dict[str, Any], previous: dict[str, Any], rerun: list[str]) -> dict[str, Any]:
    """`document` remembering the previous run's proxy headline when this run measured the proxy again."""
    before = headline_figures(previous) if "proxy" in rerun else None
    return {**document, "before": before} if before else document


def _run(command: list[str], path: Path, timeout_s: float, env: dict[str, str]) -> str:
    """Run one measurement; returns its error, or "" when it wrote its figures."""
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, timeout=timeout_s, stderr=subprocess.PIPE, text=True)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout_s:.0f} s"
    return "" if done.returncode == 0 and path.exists() else f"exit {done.returncode}: {_tail(done.stderr)}"


def _tail(text: str, lines: int = 8) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# --- rendering ---------------------------------------------------------------------------------------


def render(document: dict[str, Any], out: Path) -> Path:
    """REPORT.md and its plots in `out`, from the results document only."""
    from bench import plots

    figures = plots.draw_all(document, out)
    lines = (_header(document) + ([] if plots.installed() else [NO_PLOTS, ""])
             + _headline(document["measurements"], document.get("before"))
             + _work_headline(document["measurements"]) + _targets_table(targets(document)))
    measurements = document["measurements"]
    for section in (_proxy, _update, _rollout, _faults, _reconcile, _fanout, _memory, _serving, _profile, _payloads,
                    _streams, _density, _models, _routing, _audit, _llm_endpoint, _grpc):
        lines += section(measurements, figures)
    if document["failures"]:
        lines += ["## Measurements that failed", ""]
        lines += [f"- `bench.{name}`: {error.splitlines()[-1] if error else ''}" for name, error in
                  document["failures"].items()]
        lines.append("")
    report = out / "REPORT.md"
    report.write_text("\n".join(lines) + "\n")
    return report


def _header(document: dict[str, Any]) -> list[str]:
    m = document["machine"]
    tiny = any(doc.get("tiny") for doc in document["measurements"].values())
    return [
        "# Benchmarks: ray-gitops next to Ray Serve and the limits of this machine",
        "",
        f"Generated by {_commands(document['command'])} into `latest.json`, and rendered from it: "
        "nothing here is typed by hand.",
        f"Run {document['started_at']} → {document['finished_at']}{' at the TINY smoke size' if tiny else ''}.",
        "",
        f"Machine: {machine.label(m)}; load average {m['load_average_1m']} at the start, "
        f"{document.get('load_average_end', '?')} at the end. {NOISE}",
        "",
        "Every figure is the median of repeated runs with [min–max]; every plot names the machine and the "
        "command that produced it.",
        "",
    ]


def _commands(command: str) -> str:
    """The run's command, then each re-run of some measurements (`merged` joins them with ", then ")."""
    first, *reruns = command.split(", then ")
    shown = f"`{first}`" + (" (what `make bench` runs)" if first == "python -m bench.report" else "")
    return ", then ".join([shown, *(f"`{rerun}`" for rerun in reruns)])


def _headline(measurements: dict[str, Any], before: dict[str, Any] | None = None) -> list[str]:
    """Every system at 32 connections, noop handler, next to ours; then against the previous run."""
    doc = measurements.get("proxy")
    runs = [r for r in (doc["figures"]["runs"] if doc else []) if r["handler"] == "noop" and r["connections"] == 32]
    ours = next((r for r in runs if r["system"] == "ours"), None)
    if not runs:
        return []
    lines = ["## Headline: one noop replica, 32 connections", "",
             "| system | req/s | p50 ms | p99 ms | ours ÷ this (req/s) |", "| --- | ---: | ---: | ---: | ---: |"]
    for r in runs:
        ratio = f"×{ours['rps']['median'] / r['rps']['median']:.2f}" if ours and r["rps"]["median"] else "–"
        lines.append(f"| {r['system']} | {_spread(r['rps'], digits=0)} | {_spread(r['p50_ms'], digits=2)} | "
                     f"{_spread(r['p99_ms'], digits=1)} | {ratio} |")
    return lines + [""] + _against_before(runs, before)


def _against_before(runs: list[dict[str, Any]], before: dict[str, Any] | None) -> list[str]:
    """Ours and bare uvicorn now and in the previous run of `bench.proxy`: on a shared machine the
    absolute req/s move with its load, so the figure compared is ours ÷ uvicorn, each run's own."""
    now = {r["system"]: r["rps"] for r in runs}
    then, finished = (before or {}).get("rps", {}), (before or {}).get("finished_at")
    if not all(system in figures for system in ("ours", "uvicorn") for figures in (now, then)):
        return []

    def share(figures: dict[str, Any]) -> str:
        return f"{figures['ours']['median'] / figures['uvicorn']['median']:.2f}"

    def range_share(figures: dict[str, Any]) -> str:  # the spread the min and max of both allow
        ours, bare = figures["ours"], figures["uvicorn"]
        return f"{ours['min'] / bare['max']:.2f}–{ours['max'] / bare['min']:.2f}"

    return [f"Against the previous run of `bench.proxy` (finished {finished}): ours "
            f"{then['ours']['median']:,.0f} → {now['ours']['median']:,.0f} req/s, bare uvicorn "
            f"{then['uvicorn']['median']:,.0f} → {now['uvicorn']['median']:,.0f}; ours ÷ uvicorn "
            f"{share(then)} [{range_share(then)}] → {share(now)} [{range_share(now)}]. The machine is shared: "
            "ours ÷ uvicorn, each run's own, is the figure that carries from one run to the next.", ""]


def _work_headline(measurements: dict[str, Any]) -> list[str]:
    """Issue 35's figures side by side: a 1 MiB echo at 32 connections, 1,000 open streams, the idle replicas."""
    rows = []
    bodies = (measurements.get("payloads") or {}).get("figures", {}).get("runs", [])
    for r in bodies:
        if (r["handler"], r["size"], r["connections"]) == ("echo", 1 << 20, 32):
            rows.append(f"| 1 MiB echo, 32 connections | {r['system']} | {_spread(r['mb_s'])} MB/s, "
                        f"p99 {_spread(r['p99_ms'], digits=0)} ms |")
    streams = (measurements.get("streams") or {}).get("figures", {}).get("runs", [])
    for r in streams:
        if r["streams"] == 1000:
            memory = (r["proxy_pss_kib_per_stream"] or 0.0) + (r["replica_pss_kib_per_stream"] or 0.0)
            rows.append(f"| 1,000 open SSE streams | {r['system']} | {memory:.1f} KiB per stream, gap p99 "
                        f"{_number(r['gap_p99_ms'])} ms, {r['starved']} starved |")
    density = (measurements.get("density") or {}).get("figures", {})
    for r in density.get("runs", []):
        rows.append(f"| {r['replicas']} idle replicas | {r['system']} | {_number(r['replica_pss_mb'], 1)} MB PSS "
                    f"per replica, all ready in {r['ready_s']:.1f} s |")
    if not rows:
        return []
    return ["## Headline: the work users send (issue 35)", "", "| work | system | figures |",
            "| --- | --- | --- |", *rows, ""]


def _targets_table(rows: list[Target]) -> list[str]:
    lines = ["## Where we stand against the targets (issues 15, 19, 30, 31, 35, 43, 45 and 48)", "",
             "| target | measured | |", "| --- | --- | --- |"]
    for row in rows:
        verdict = {True: "met", False: "**missed**", None: "not measured"}[row.met]
        measured = row.measured
        if row.met is False and row.beyond:
            verdict, measured = "**missed**: beyond this machine", f"{measured}; {row.beyond}"
        lines.append(f"| {row.target} | {measured} | {verdict} |")
    return lines + [""]


def _spread(s: dict[str, Any] | None, scale: float = 1.0, digits: int = 1) -> str:
    if not s or s.get("median") is None:
        return "–"
    return (f"{s['median'] * scale:,.{digits}f} [{s['min'] * scale:,.{digits}f}–{s['max'] * scale:,.{digits}f}]")


def _cores(run: dict[str, Any]) -> str:
    """How many of the machine's cores were busy during the run, and how many of them wrk used."""
    busy, load = median(run.get("busy_cores")), median(run.get("wrk_cores"))
    return "–" if busy is None or load is None else f"{busy:.2f} ({load:.2f})"


def _times(ratio: float | None) -> str:
    return "–" if ratio is None else f"×{ratio:.2f}"


def _command(doc: dict[str, Any]) -> str:
    return f"Command: `{doc['command']}`."


def _proxy(measurements: dict[str, Any], figures: dict[str, Any]) -> list[str]:
    doc = measurements.get("proxy")
    if not doc:
        return []
    f = doc["figures"]
    lines = ["## 1–2. Proxy throughput and latency", "",
             "wrk on loopback, one noop replica (5 ms handlers: two replicas). "
             f"{f['duration_s']:g} s per run, {f['repeats']} runs per point. {_command(doc)}", "",
             "Cores busy: the whole machine's busy CPU during the measured runs (every process and the kernel), "
             "with wrk's own share in brackets. "
             "Serve's access log is off in every configuration. serve-direct with two replicas: the connections "
             "are split between the replicas' own ports (the best a client-side balancer could do). uvicorn and "
             "granian run one worker process per replica.", ""]
    for handler in ("noop", "async5", "cpu5"):
        runs = [r for r in f["runs"] if r["handler"] == handler]
        if not runs:
            continue
        lines += [f"### handler `{handler}` ({runs[0]['replicas']} replica(s))", ""]
        if handler in figures.get("proxy", {}):
            lines += [f"![{handler}]({figures['proxy'][handler]})", ""]
        lines += ["| system | connections | req/s | p50 ms | p99 ms | non-2xx + errors | cores busy (wrk's) |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in runs:
            lines.append(f"| {r['system']} | {r['connections']} | {_spread(r['rps'], digits=0)} | "
                         f"{_spread(r['p50_ms'], digits=2)} | {_spread(r['p99_ms'], digits=2)} | "
                         f"{r['non_2xx'] + r['socket_errors']:.0f} | {_cores(r)} |")
        lines.append("")
        ratios = [r for r in f.get("ratios", []) if r["handler"] == handler]
        if ratios:
            lines += ["Ratios at the same connections: req/s and p99 against Serve's fastest configuration in this "
                      "run, req/s against the raw httptools ceiling.", "",
                      "| system | connections | req/s vs Serve | p99 vs Serve | req/s vs raw | Serve's fastest |",
                      "| --- | ---: | ---: | ---: | ---: | --- |"]
            lines += [f"| {r['system']} | {r['connections']} | {_times(r['rps_vs_serve'])} | "
                      f"{_times(r['p99_vs_serve'])} | {_times(r['rps_vs_raw'])} | {r['serve_fastest'] or '–'} |"
                      for r in ratios]
            lines.append("")
    if f["failures"]:
        lines += ["Systems that could not be measured here:", ""]
        lines += [f"- {key}: `{error.splitlines()[-1][:200] if error else ''}`" for key, error in f["failures"].items()]
        lines.append("")
    return lines


def _update(measurements: dict[str, Any], figures: dict[str, Any]) -> list[str]:
    doc = measurements.get("update_latency")
    if not doc:
        return []
    f = doc["figures"]
    lines = ["## 3. Lightweight update: action → effective at the proxy", "",
             f"{f['changes']} changes each; ms. {_command(doc)}", "",
             "| system | change | median [min–max] ms |", "| --- | --- | ---: |"]
    for system in ("ours", "serve"):
        for kind, got in f.get(system, {}).items():
            action = "git commit" if system == "ours" else "REST PUT (serve deploy)"
            lines.append(f"| {system} | {kind} by {action} | {_spread(got['seconds'], 1e3)} |")
    return lines + [""]


def _rollout(measurements: dict[str, Any], figures: dict[str, Any]) -> list[str]:
    doc = measurements.get("rollout")
    if not doc:
        return []
    f = doc["figures"]
    lines = ["## 4. Code rollout under load", "",
             f"{f['replicas']} replicas, {f['rate']:g} req/s open loop, {f['rollouts']} rollouts each. "
             f"{_command(doc)}", "",
             "| system | total s | failed / requests | p99 ms |", "| --- | ---: | ---: | ---: |"]
    for system in ("ours", "serve"):
        got = f.get(system)
        if got:
            lines.append(f"| {system} | {_spread(got['total_s'], digits=2)} | {got['failed']} / {got['requests']} | "
                         f"{_spread(got['p99_ms'], digits=0)} |")
    return lines + [""]


def _faults(measurements: dict[str, Any], figures: dict[str, Any]) -> list[str]:
    doc = measurements.get("faults")
    if not doc:
        return []
    f = doc["figures"]
    lines = ["## 5. kill -9 under load", "",
             f"{f['rate']:g} req/s open loop, {f['kills']} kill(s) each. Controller: time until the goal API "
             f"answers; proxy: time until a new connection gets a 200 (Serve: its default Python proxy). "
             f"{_command(doc)}", "",
             "| system | killed | back after s | failed / requests |", "| --- | --- | ---: | ---: |"]
    for system in ("ours", "serve"):
        for role, got in f.get(system, {}).items():
            lines.append(f"| {system} | {role} | {_spread(got['recovery_s'], digits=2)} | "
                         f"{got['failed']} / {got['requests']} |")
    return lines + [""]


def _reconcile(measurements: dict[str, Any], figures: dict[str, Any]) -> list[str]:
    doc = measurements.get("reconcile")
    if not doc:
        return []
    f = doc["figures"]
    lines = ["## 6. Reconcile cost vs repository size", "",
             f"The agent's load+validate+plan; {f['repeats']} runs per point. {_command(doc)}", ""]
    if "reconcile" in figures:
        lines += [f"![reconcile]({figures['reconcile']})", ""]
    lines += ["| specs | cold ms | unchanged tick ms | one-file change ms | peak MB | held MB |",
              "| ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in f["rows"]:
        lines.append(f"| {r['specs']:,} | {_spread(r['cold_s'], 1e3)} | {_spread(r['unchanged_s'], 1e3, 2)} | "
                     f"{_spread(r['one_file_s'], 1e3)} | {r['peak_mb']:.1f} | {r['held_mb']:.1f} |")
    lines += ["", "Growth per 10× more specs (1.0 = linear):", ""]
    for field, steps in f["growth"].items():
        lines.append(f"- {field}: " + ", ".join(f"{s['from']:,}→{s['to']:,} ×{s['growth']:.2f}" for s in steps))
    return lines + [""]


def _fanout(measurements: dict[str, Any], figures: dict[str, Any]) -> list[str]:
    doc = measurements.get("fanout")
    if not doc:
        return []
    lines = ["## 7. Config fan-out for one traffic change", "", _command(doc), "",
             "| endpoints | bytes pushed | keys | a broadcast of every endpoint |", "| ---: | ---: | ---: | ---: |"]
    for r in doc["figures"]["rows"]:
        lines.append(f"| {r['endpoints']:,} | {r['pushed_bytes']:,} | {r['pushed_keys']} | {r['broadcast_bytes']:,} |")
    return lines + [""]


def _memory(measurements: dict[str, Any], figures: dict[str, Any]) -> list[str]:
    doc = measurements.get("memory")
    if not doc:
        return []
    f = doc["figures"]
    lines = ["## 8. Memory (PSS, MB)", "",
             f"Idle, and the peak under wrk -c32. One replica. \"All processes\" is every process the run's Ray "
             f"and agent started, Ray's own daemons included; Serve's includes the dashboard its REST API needs, "
             f"which ours runs without. {_command(doc)}", ""]
    if "memory" in figures:
        lines += [f"![memory]({figures['memory']})", ""]
    lines += ["| system | state | agent | controller | proxy | replica | all processes |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for system in ("ours", "serve"):
        for state in ("idle", "load"):
            got = f.get(system, {}).get(state)
            if got:
                cells = " | ".join(f"{got[r]:.0f}" if r in got else "–"
                                   for r in ("agent", "controller", "proxy", "replica", "ray_total"))
                lines.append(f"| {system} | {state} | {cells} |")
    return lines + [""]


def _serving(measurements: dict[str, Any], figures: dict[str, Any]) -> list[str]:
    doc = measurements.get("serving")
    if not doc:
        return []
    f = doc["figures"]
    systems = f["systems"]
    serve_mode = "direct ingress" if f.get("serve_direct_ingress") else "its Python proxy"

    def cells(part: dict[str, Any], keys: tuple[str, ...], digits: int = 0) -> str:
        """Rates as whole numbers, milliseconds (`*_ms`) with 1 + `digits` decimals."""
        reason = part.get("failed") or part.get("skipped")
        if reason is not None:
            return f"{'failed' if 'failed' in part else 'skipped'}: {reason}" + " |" * (len(keys) - 1)
        return " | ".join(f"{part[key]:,.{1 + digits if key.endswith('_ms') else 0}f}" for key in keys)

    lines = ["## Serving: batching, handles, streaming (issue 13)", "",
             f"Ray Serve through {serve_mode}, `max_ongoing_requests=100`, access log off. {_command(doc)}", "",
             f"Batched numpy model (`tanh(x @ W)`, W {f['dim']}×{f['dim']} float32), one replica, "
             f"wrk -c{f['connections']}; batched: max_batch_size {f['max_batch_size']}, 5 ms wait "
             "(ours `[batching]`, Serve `@serve.batch`).", "",
             "| system | plain req/s | p99 ms | batched req/s | p99 ms |", "| --- | ---: | ---: | ---: | ---: |"]
    lines += [f"| {system} | {cells(got['model'], ('rps', 'p99_ms'))} | {cells(got['batched'], ('rps', 'p99_ms'))} |"
              for system, got in systems.items()]
    lines += ["", f"Handle calls replica to replica ({f['handle_calls']:,} calls, timed inside the caller: "
              "ours `ray_gitops.serving.handle`, Serve `DeploymentHandle`).", "",
              "| system | p50 ms | p99 ms | calls/s, 16 at a time |", "| --- | ---: | ---: | ---: |"]
    lines += [f"| {system} | {cells(got['handles'], ('p50_ms', 'p99_ms', 'concurrent_calls_per_s'), 1)} |"
              for system, got in systems.items()]
    lines += ["", f"Streaming ({f['stream_chunks']:,} chunks of 1 KiB, httpx streaming client).", "",
              "| system | time to first byte ms | chunks/s |", "| --- | ---: | ---: |"]
    lines += [f"| {system} | {cells(got['stream'], ('ttfb_p50_ms', 'chunks_per_s'), 1)} |"
              for system, got in systems.items()]
    if f.get("ratios"):
        lines += ["", "Ours / Serve (above 1: ours better): "
                  + ", ".join(f"{label} {value:.2f}×" for label, value in f["ratios"].items()) + "."]
    if f.get("failures"):
        lines += ["", "Failed: " + "; ".join(f"{s}: {e.splitlines()[-1]}" for s, e in f["failures"].items())]
    return lines + [""]


def _profile(measurements: dict[str, Any], figures: dict[str, Any]) -> list[str]:
    doc = measurements.get("proxy_profile")
    if not doc:
        return []
    f = doc["figures"]
    if "skipped" in f:
        return ["## Profile: where a request's time goes (issue 19)", "", f"Skipped: {f['skipped']}.", ""]
    requests = f["load"]["rps"] * f["duration_s"]
    lines = ["## Profile: where a request's time goes (issue 19)", "",
             f"One noop replica, wrk -c{f['connections']} for {f['duration_s']:.0f} s "
             f"({f['load']['rps']:.0f} req/s, p99 {f['load']['p99_ms']:.1f} ms), py-spy at {f['rate']} Hz on the "
             "proxy and the replica, sampling the thread that holds the GIL; each stack goes to the stage of its "
             "innermost recognised frame. The native row is the rest of each process's CPU time (from /proc): "
             "threads that ran without the GIL. Approximate: a thread that blocks while holding the GIL is "
             "sampled as busy, so a process's Python rows can exceed its CPU time (its native row is then 0). "
             f"{_command(doc)}", "",
             "| stage | process | share of CPU | µs per request |", "| --- | --- | ---: | ---: |"]
    for row in f["rows"]:
        per_request = row["cpu_s"] / requests * 1e6 if requests else float("nan")
        lines.append(f"| {row['stage']} | {row['process']} | {row['share']:.1%} | {per_request:.1f} |")
    return lines + [""]


def _not_measured(failures: dict[str, str] | None) -> list[str]:
    """A section's line naming what it could not measure, each with its error's last line; none if all ran."""
    if not failures:
        return []
    return ["Could not be measured: " + "; ".join(f"{key}: `{error.splitlines()[-1][:200] if error else ''}`"
                                                for key, error in failures.items()), ""]


def _load(doc: dict[str, Any]) -> str:
    return f"Load average {doc['machine']['load_average_1m']} at the end of this measurement."


def _size(size: int) -> str:
    return f"{size // (1 << 20)} MiB" if size >= 1 << 20 else f"{size // 1024} KiB"


def _payloads(measurements: dict[str, Any], figures: dict[str, Any]) -> list[str]:
    doc = measurements.get("payloads")
    if not doc:
        return []
    f = doc["figures"]
    lines = ["## Bodies: 1 KiB to 16 MiB (issue 35)", "",
             "wrk POSTs a body of each size (a Lua script) to one replica: `echo` answers the body, `consume` reads "
             "it and answers 1 KiB. MB/s counts the body bytes of the requests answered 2xx, both ways; CPU per MB "
             "is what the proxy's processes (ours; Serve's proxy and HAProxy) and the replica's (ours, Serve's, or "
             "uvicorn/granian themselves) spent during the measured runs per MB carried. "
             f"{f['duration_s']:g} s per run, {f['repeats']} runs per point. {_load(doc)} {_command(doc)}", ""]
    if "payloads" in figures:
        lines += [f"![payloads]({figures['payloads']})", ""]
    for handler in ("echo", "consume"):
        runs = [r for r in f["runs"] if r["handler"] == handler]
        if not runs:
            continue
        lines += [f"### handler `{handler}`", "",
                  "| system | body | connections | req/s | MB/s | p50 ms | p99 ms | proxy CPU ms/MB | "
                  "replica CPU ms/MB | non-2xx + errors |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in sorted(runs, key=lambda r: (r["size"], r["connections"])):
            lines.append(f"| {r['system']} | {_size(r['size'])} | {r['connections']} | {_spread(r['ok_rps'], digits=0)} | "
                         f"{_spread(r['mb_s'])} | {_spread(r['p50_ms'], digits=2)} | {_spread(r['p99_ms'], digits=1)} | "
                         f"{_spread(r['proxy_cpu_ms_per_mb'], digits=2)} | "
                         f"{_spread(r['replica_cpu_ms_per_mb'], digits=2)} | {r['non_2xx'] + r['socket_errors']:.0f} |")
        lines.append("")
    if f.get("ratios"):
        lines += ["Ours' MB/s against the others at the same point:", "",
                  "| handler | body | connections | vs Serve's fastest | vs uvicorn | vs the fastest bare app |",
                  "| --- | ---: | ---: | ---: | ---: | ---: |"]
        lines += [f"| {r['handler']} | {_size(r['size'])} | {r['connections']} | {_times(r['vs_serve'])} "
                  f"({r['serve_fastest'] or '–'}) | {_times(r['vs_uvicorn'])} | {_times(r['vs_bare'])} "
                  f"({r['bare_fastest'] or '–'}) |" for r in f["ratios"]]
        lines.append("")
    lines += _not_measured(f.get("failures"))
    return lines


def _streams(measurements: dict[str, Any], figures: dict[str, Any]) -> list[str]:
    doc = measurements.get("streams")
    if not doc:
        return []
    f = doc["figures"]
    lines = ["## Open streams: thousands of SSE clients at once (issue 35)", "",
             f"Each client opens a stream that sends {f['rate']} small events a second for {f['seconds']:g} s, all at "
             "once, from one uvloop client process on raw sockets. Memory per stream: the peak while every stream "
             "is open less the figure before, divided by the streams (PSS, RSS in brackets). Short: fewer events "
             f"than sent; starved: a gap above {f['starved_s']:g} s. The client's CPU seconds show how much of the "
             f"machine it took. {_load(doc)} {_command(doc)}", "",
             *([f"![streams]({figures['streams']})", ""] if "streams" in figures else []),
             "| system | streams | failed | short | starved | events/s (of sent) | gap p50 / p99 / max ms | "
             "proxy KiB/stream | replica KiB/stream | client CPU s |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in f["runs"]:
        share = r["events"] / r["events_expected"] if r["events_expected"] else 0.0
        lines.append(f"| {r['system']} | {r['streams']:,} | {r['failed']} | {r['short']} | {r['starved']} | "
                     f"{r['events_per_s']:,.0f} ({share:.0%}) | {_number(r['gap_p50_ms'])} / {_number(r['gap_p99_ms'])} "
                     f"/ {_number(r['gap_max_ms'])} | {_kib(r, 'proxy')} | {_kib(r, 'replica')} | "
                     f"{r['client_cpu_s']:.1f} |")
    lines.append("")
    lines += _not_measured(f.get("failures"))
    return lines


def _number(value: float | None, digits: int = 0) -> str:
    return "–" if value is None or value != value else f"{value:,.{digits}f}"  # None or NaN: not measured


def _kib(run: dict[str, Any], role: str) -> str:
    pss, rss = run[f"{role}_pss_kib_per_stream"], run[f"{role}_rss_kib_per_stream"]
    return "–" if pss is None else f"{pss:.1f} ({_number(rss, 1)})"


def _density(measurements: dict[str, Any], figures: dict[str, Any]) -> list[str]:
    doc = measurements.get("density")
    if not doc:
        return []
    f = doc["figures"]
    lines = ["## Density: idle replicas on one node (issues 35 and 48)", "",
             f"{' and '.join(map(str, f['replicas']))} replicas of one small backend (ours) or deployment (Serve), "
             "`num_cpus=0`; a larger count only where the smaller one's PSS per replica says it fits in "
             f"{FIT_SHARE:.0%} of the node's memory. Ready: "
             "ours' backend and endpoint goals met, Serve's `serve.run` returned; the clock starts once the "
             "controller answers. `ray-actor` is the floor under both: as many bare Ray actors of an empty class, "
             "ready once each answered a call. PSS read after the stack settled. Route table: the bytes a proxy receives when "
             f"it subscribes to the routes, the endpoint and its replica set. {_load(doc)} {_command(doc)}", "",
             *([f"![density]({figures['density']})", ""] if "density" in figures else []),
             "| system | replicas | replica processes | ready s | PSS MB per replica | all replicas MB | proxy MB | "
             "route table bytes |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in f["runs"]:
        lines.append(f"| {r['system']} | {r['replicas']} | {r['replica_processes']} | {r['ready_s']:.1f} | "
                     f"{_number(r['replica_pss_mb'], 1)} | {_number(r['replicas_pss_mb'])} | "
                     f"{_number(r['proxy_pss_mb'])} | {_number(r.get('route_table_bytes'))} |")
    lines.append("")
    if f.get("unfit"):
        lines += ["Not started, as it would not fit: " + "; ".join(f"{key}: {why}" for key, why in f["unfit"].items()), ""]
    lines += _not_measured(f.get("failures"))
    return lines


def _models(measurements: dict[str, Any], figures: dict[str, Any]) -> list[str]:
    doc = measurements.get("models")
    if not doc:
        return []
    f = doc["figures"]
    lines = ["## Models: fetching into a node's cache, and many models per replica (issue 29)", "",
             f"One model of {f['model_mb']:,.0f} MB in moto's S3 server on 127.0.0.1 (Python serves it: compare the "
             f"clients side by side, not with a real store). {_load(doc)} {_command(doc)}", "",
             "| | ours (obstore, verified) | boto3 `download_file` |", "| --- | ---: | ---: |",
             f"| cold fetch MB/s | {f['cold_fetch_mb_s']:,.1f} | {f['boto3_download_file_mb_s']:,.1f} |", "",
             f"Cache hit: {f['hit_fetched_bytes']:,} bytes fetched, staged (verified) in {f['hit_stage_s']:.2f} s, "
             f"beside {f['local_disk_read_s']:.2f} s to read the file from local disk. Four processes staging it at "
             f"once on one node fetched {f['four_at_once_fetched_bytes']:,.0f} bytes "
             f"({f['four_at_once_fetched_bytes'] / max(f['cold_fetched_bytes'], 1):.2f} x the model); "
             f"the slowest took {f['four_at_once_slowest_s']:.2f} s.", ""]
    o = f.get("oci")
    if o:
        lines += [
            f"OCI (`oci://`): a modelcar whose one plain tar layer is {o['layer_mb']:,.0f} MB, in Debian's "
            "docker-registry on 127.0.0.1, beside a plain HTTP download of the same blob from it (httpx, streamed "
            "to a file, nothing checked). Target: at least 0.8 x.", "",
            "| | MB/s | x the plain download |", "| --- | ---: | ---: |",
            f"| plain HTTP blob download | {o['plain_blob_download_mb_s']:,.1f} | 1.00 |",
            f"| our fetch (blob verified as it streams, /models extracted) | {o['fetch_mb_s']:,.1f} | "
            f"{o['fetch_vs_plain']:.2f} |",
            f"| our cold stage (the fetch, then the model directory's digest checked from the hashes taken as it "
            f"streamed) | {o['cold_stage_mb_s']:,.1f} | "
            f"{o['cold_stage_vs_plain']:.2f} |", "",
        ]
    h = f.get("hub")
    if h:
        lines += [
            f"Hugging Face (`hf://`): a repository of {h['model_mb']:,.0f} MB on a loopback Hub (its HTTP API and "
            "LFS redirect, served by another process), beside a plain HTTP download of the weights file from it "
            "(httpx, streamed to a file, nothing checked). Target: at least 0.8 x.", "",
            "| | MB/s | x the plain download |", "| --- | ---: | ---: |",
            f"| plain HTTP download | {h['plain_download_mb_s']:,.1f} | 1.00 |",
            f"| our fetch (each file hashed as it is written) | {h['fetch_mb_s']:,.1f} | {h['fetch_vs_plain']:.2f} |",
            f"| our cold stage (the fetch, then the manifest digest checked) | {h['cold_stage_mb_s']:,.1f} | "
            f"{h['cold_stage_vs_plain']:.2f} |", "",
        ]
    m = f.get("multiplexing")
    if m:
        lines += [
            f"Multiplexing: {m['models']} models on {m['replicas']} replicas, `max_models_per_replica = "
            f"{m['max_models_per_replica']}`, {m['requests']:,} requests of a skewed mix (the hottest model "
            f"{m['hottest_model_share']:.0%} of them). Model loads per 1,000 requests:", "",
            "| routing | loads per 1,000 requests |", "| --- | ---: |",
            f"| affinity, real stack (`gitops run`, its proxy, {m['real_replicas_used']} replicas used) | "
            f"{m['real_affinity_loads_per_1000']:.1f} |",
            f"| affinity, in process (the proxy's pool, the replicas' loaders) | {m['affinity_loads_per_1000']:.1f} |",
            f"| random replica, in process (the same loaders) | {m['random_loads_per_1000']:.1f} |", "",
        ]
    return lines


def _audit(measurements: dict[str, Any], figures: dict[str, Any]) -> list[str]:
    doc = measurements.get("audit")
    if not doc:
        return []
    rows = doc["figures"]["rows"]
    lines = ["## The audit trail's cost (issue 31)", "",
             "Our proxy with one worker and the noop handler on one replica, `wrk` POSTing 1 KiB bodies at 32 "
             "connections. Each round measures a controller without tracing or capture (off), then the configuration "
             "on a second controller beside it; a ratio is of their medians. Tracing exports to a loopback OTLP/HTTP "
             "receiver; requests carry no `traceparent`. Capture writes to a file sink; records written and dropped "
             f"are read from `gitops_capture_records_total`. {_load(doc)} {_command(doc)}", "",
             "| configuration | req/s | off req/s | × off | p99 ms | off p99 ms | records written | dropped | errors |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['config']} | {r['rps']:,.0f} | {r['off_rps']:,.0f} | {r['ratio']:.2f} | {r['p99_ms']:.1f} | "
              f"{r['off_p99_ms']:.1f} | {r['records_written']:,.0f} | {r['records_dropped']:,.0f} | {r['non_2xx']:,.0f} |"
              for r in rows]
    lines.append("")
    return lines


def _routing(measurements: dict[str, Any], figures: dict[str, Any]) -> list[str]:
    doc = measurements.get("routing")
    if not doc:
        return []
    f = doc["figures"]
    load = "; ".join(f"{system} {a:.1f} → {b:.1f}" for system, (a, b) in f.get("load_average", {}).items())
    sim = f["sim"]
    lines = ["## Routing policies on an LLM (issue 30)", "",
             f"The LLM simulator (`deployments/apps/llm_sim.py`, {f['replicas']} replicas: "
             f"{sim['prefill_s_per_token'] * 1e3:g} ms prefill per prompt token not in the replica's prefix cache, "
             f"{sim['decode_s_per_token'] * 1e3:g} ms per output token, {sim['max_tokens']} tokens per answer), fresh "
             f"replicas for each run. Shared: {f['conversations']} conversations of {f['turns']} turns at once, each "
             "turn sending the conversation so far (streamed); unshared: as many prompts of the same sizes, each "
             "of its own. Ours: the proxy with `key = \"json:messages\"`. Serve: Ray Serve 2.60 with direct "
             "ingress and the access log off, an ingress deployment calling the simulator's deployment through a "
             "handle (Serve's router reads the prompt from a handle call's argument, as in Serve LLM); its "
             f"`request_router_config` names `{f['serve_router']['prefix_cache_affinity']}` (the class "
             f"`{f['serve_public_router']}` re-exports; that path imports Serve LLM's dependencies, vLLM included) "
             f"or Serve's default power-of-two router. Load average (1 min) before → after each system: {load}. "
             f"{_command(doc)}", "",
             "| workload | system | policy | TTFT mean ms | TTFT p99 ms | output tokens/s | prompt tokens cached |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for r in f["runs"]:
        lines.append(f"| {r['workload']} | {r['system']} | {r['policy']} | {r['ttft_mean_s'] * 1e3:,.1f} | "
                     f"{r['ttft_p99_s'] * 1e3:,.1f} | {r['output_tokens_per_s']:,.1f} | "
                     f"{_number(r['cached_share'] * 100 if r['cached_share'] is not None else None)}% |")
    lines.append("")
    lines += _not_measured(f.get("failures"))
    decisions = f.get("decision_us") or []
    if decisions:
        lines += [f"The routing decision in-process, CPU time per request, the key's read included ({f['replicas']} replicas, a "
                  f"{decisions[0]['body_bytes']:,} B chat body of 20 turns; best of 7 × 2,000). For a `json:` key, "
                  "its read alone and the whole-body parse it cost before.", "",
                  "| policy | key | µs per decision | `json:` read µs | whole-body parse µs |",
                  "| --- | --- | ---: | ---: | ---: |"]
        lines += [f"| {r['policy']} | {r['key']} | {r['decision_us']:.2f} | {_number(r.get('read_us'), 2)} | "
                  f"{_number(r.get('full_parse_read_us'), 2)} |" for r in decisions]
        lines.append("")
    return lines


def _llm_endpoint(measurements: dict[str, Any], figures: dict[str, Any]) -> list[str]:
    doc = measurements.get("llm_endpoint")
    if not doc:
        return []
    f = doc["figures"]
    before, after = f["load_average"]
    lines = ["## The OpenAI endpoint through our proxy (issue 43)", "",
             f"The built-in CPU engine (`{f['engine']}`) behind the built-in OpenAI layer, served directly by uvicorn "
             "(an engine's own OpenAI server) and as a `[backends.X.llm]` backend of one replica behind our proxy. "
             "The same client sends streamed chat completions, the two systems alternating: medians of the rounds "
             "[min–max]. TTFT: to the first content chunk; a request's tokens/s: its tokens over its whole time "
             "(median); output: tokens/s over the round. "
             f"Load average (1 min) {before:.1f} → {after:.1f}. {_command(doc)}", "",
             f"**The engine at its own speed**: {f['max_tokens']} tokens a request, {f['requests']} per round at "
             f"each concurrency, {f['rounds']} rounds. This engine makes about 10⁴ tokens/s, a GPU model 10–100 per "
             "request: the share of our per-token cost is at its worst here, so the overhead is also said in time "
             "added, per request and per token.", "",
             *_llm_series(f)]
    paced = f.get("paced")
    if paced:
        lines += [f"**The same engine at a GPU model's pace** (`bench.llm_paced`): its first token after "
                  f"{paced['first_s'] * 1e3:g} ms, each later one {paced['token_s'] * 1e3:g} ms after the one before "
                  "(a GPU's times, assumed: none is here; what our proxy adds at that pace is measured); "
                  f"{paced['max_tokens']} tokens a request, {paced['requests']} per round at each concurrency, "
                  f"{paced['rounds']} rounds.", "", *_llm_series(paced)]
    return lines


def _llm_series(f: dict[str, Any]) -> list[str]:
    """One series' runs and its overhead rows."""
    lines = ["| system | in flight | TTFT p50 ms | TTFT p99 ms | request p50 ms | a request's tokens/s | output tokens/s |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in sorted(f["runs"], key=lambda r: (r["concurrency"], r["system"])):
        lines.append(f"| {r['system']} | {r['concurrency']} | {_spread(r['ttft_p50_s'], 1e3, 2)} | "
                     f"{_spread(r['ttft_p99_s'], 1e3, 2)} | {_spread(r['request_p50_s'], 1e3, 2)} | "
                     f"{_spread(r['request_tokens_per_s'], digits=0)} | {_spread(r['output_tokens_per_s'], digits=0)} |")
    lines.append("")
    if f["overhead"]:
        lines += ["| in flight | ours ÷ direct: TTFT p50 | a request's tokens/s | output tokens/s | added: first token ms "
                  "| a request ms | a token µs |",
                  "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        lines += [f"| {o['concurrency']} | ×{o['ttft_ratio']:.2f} | ×{o['tokens_ratio']:.2f} | "
                  f"×{o['throughput_ratio']:.2f} | {o['ttft_added_s'] * 1e3:+.2f} | {o['request_added_s'] * 1e3:+.2f} | "
                  f"{o['token_added_s'] * 1e6:+.0f} |" for o in f["overhead"]]
        lines.append("")
    return lines


def _grpc(measurements: dict[str, Any], figures: dict[str, Any]) -> list[str]:
    doc = measurements.get("grpc")
    if not doc:
        return []
    f = doc["figures"]
    before, after = f["load_average"]
    lines = ["## gRPC through our proxy (issue 45)", "",
             "Unary calls (`bench.grpc_apps`): noop, a `BytesValue` in and a constant one out; v2, an Open Inference "
             f"Protocol `ModelInfer` of a 1×{f['v2_width']} FP32 tensor (raw contents) to a model answering y = 2x. "
             "Ours: one replica of each behind our proxy's gRPC port; grpcio: the same servicer and the same v2 "
             "service on `grpc.aio.server` in a process of its own; serve-direct (serve-proxy): Ray Serve 2.60's "
             "gRPC ingress (`grpc_servicer_functions`) through each replica's own port, direct ingress (through its "
             "gRPC proxy), `max_ongoing_requests=100`, access log off. The client is grpcio's asyncio client, the "
             f"calls in flight spread over {f['channels']} channels, {f['duration_s']:g} s per run; the systems are "
             f"up at once and alternate within each round ({f['rounds']}): medians of the rounds [min–max]. "
             "Client cores: "
             "the client's CPU use (near 1.0, the client was the limit). "
             f"Load average (1 min) {before:.1f} → {after:.1f}. {_command(doc)}", "",
             "| system | call | in flight | calls/s | p50 ms | p99 ms | calls | errors | client cores |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in sorted(f["runs"], key=lambda r: (r["call"], r["in_flight"], r["system"])):
        lines.append(f"| {r['system']} | {r['call']} | {r['in_flight']} | {_spread(r['calls_per_s'], digits=0)} | "
                     f"{_spread(r['p50_ms'], digits=2)} | {_spread(r['p99_ms'], digits=2)} | {r['calls']:,} | "
                     f"{r['errors']:,} | {_number(r['client_cores']['median'], 2)} |")
    lines.append("")
    if f["ratios"]:
        lines += ["| call | in flight | ours ÷ grpcio (calls/s) | ours ÷ Serve's fastest (calls/s) |",
                  "| --- | ---: | ---: | ---: |"]
        lines += [f"| {r['call']} | {r['in_flight']} | {_times(r['vs_grpcio'])} | {_times(r['vs_serve'])} "
                  f"({r['serve_fastest'] or '–'}) |" for r in f["ratios"]]
        lines.append("")
    lines += _not_measured(f.get("failures"))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="every measurement at its smoke-test size")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--only", default=",".join(MEASUREMENTS))
    parser.add_argument("--jobs", type=int, default=1,
                        help="measurements run at once (the smoke's; figures of a full run want 1)")
    parser.add_argument("--render-only", action="store_true", help="re-render REPORT.md from latest.json")
    args = parser.parse_args()
    latest = args.out / "latest.json"
    names = [n for n in args.only.split(",") if n]
    if args.render_only:
        document = json.loads(latest.read_text())
    else:
        document = run_all(names, args.tiny, args.out, args.jobs)
        if latest.exists():
            previous = json.loads(latest.read_text())
            document = with_before(document, previous, names)
            if set(names) != set(MEASUREMENTS):
                document = merged(previous, document)
        latest.write_text(json.dumps(document, indent=1))
    print(f"report: {render(document, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
