"""Autoscaling under a load step: replica count and latency over time.

`gitops run` (a fresh local Ray, loopback ports) serves one autoscaled
backend whose replicas take 2 requests at a time, 50 ms each; a closed-loop
loopback client runs LOW workers, steps to HIGH workers, then back to LOW.
Every second the controller's target and RUNNING replicas are read, and the
requests sent in that second give req/s, p50, p99 and failures. Prints the
table and a summary (time to the first decision, to full scale, back down,
p99 before / while scaling / once scaled); plots to bench/autoscale.png when
matplotlib is installed. Never asserts on time.

    python bench/autoscale.py [--low 2] [--high 16] [--before 10] [--during 40] [--after 40]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__" and Path(sys.path[0]).resolve() == ROOT / "bench":
    # Run as a script, this file's folder would shadow the project's packages.
    sys.path[0] = str(ROOT)

from tests.conftest import GitRepo
from vocabulary.control.longpoll import ReplicaState
from tests.real.apps.autoscale_stack import (
    APP_SOURCE,
    AgentProcess,
    Answer,
    Load,
    controller_status,
)

SPEC = """
[backends.slow]
import_path = "apps.slow:slow"
max_concurrent_queries = 2
graceful_shutdown_timeout_s = 5
ray_actor_options = {{ num_cpus = 0 }}

[backends.slow.autoscaling]
min_replicas = 1
max_replicas = {max_replicas}
target_ongoing_requests = 2
upscale_delay_s = {upscale}
downscale_delay_s = {downscale}

[endpoints.slow]
route = "/slow"
traffic = {{ slow = 1.0 }}
"""


@dataclass(frozen=True)
class Second:
    t: int  # seconds since the start of the run
    workers: int
    target: int
    running: int
    requests: int
    failed: int
    p50_ms: float
    p99_ms: float


def main() -> None:
    args = _parse()
    from controller.cluster import init_ray, shutdown_ray

    init_ray()
    import ray

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        repo = GitRepo(work / "repo")
        repo.write("apps/__init__.py", "")
        repo.write("apps/slow.py", APP_SOURCE)
        repo.write("deployments/slow.toml", SPEC.format(
            max_replicas=args.max_replicas, upscale=args.upscale_delay, downscale=args.downscale_delay))
        commit = repo.commit("autoscaled slow backend")
        agent = AgentProcess(repo.root, work, ray.get_runtime_context().gcs_address)
        try:
            agent.wait_applied(commit)
            seconds = _run(agent, args)
        finally:
            agent.stop()
    shutdown_ray()
    _print_table(seconds)
    _print_summary(seconds, args)
    _plot(seconds)


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--low", type=int, default=2, help="workers before and after the step")
    parser.add_argument("--high", type=int, default=16, help="workers during the step")
    parser.add_argument("--before", type=int, default=10, help="seconds of low load first")
    parser.add_argument("--during", type=int, default=40, help="seconds of high load")
    parser.add_argument("--after", type=int, default=40, help="seconds of low load after")
    parser.add_argument("--max-replicas", type=int, default=8)
    parser.add_argument("--upscale-delay", type=float, default=2.0)
    parser.add_argument("--downscale-delay", type=float, default=10.0)
    return parser.parse_args()


def _run(agent: AgentProcess, args: argparse.Namespace) -> list[Second]:
    load = Load(agent.proxy + "/slow")
    phases = [(args.before, args.low), (args.during, args.high), (args.after, args.low)]
    start = time.monotonic()
    counts: list[tuple[int, int, int, int]] = []  # (second, workers, target, running)
    try:
        second = 0
        for duration, workers in phases:
            load.set_workers(workers)
            for _ in range(duration):
                target, running = _replicas()
                counts.append((second, workers, target, running))
                second += 1
                time.sleep(max(0.0, start + second - time.monotonic()))
    finally:
        load.stop()
    return [_second(s, w, tg, r, load.answers(), start) for s, w, tg, r in counts]


def _replicas() -> tuple[int, int]:
    backend = controller_status().backends["slow"]
    running = sum(1 for r in backend.replicas if r.state is ReplicaState.RUNNING)
    return backend.target_replicas, running


def _second(t: int, workers: int, target: int, running: int, answers: list[Answer], start: float) -> Second:
    inside = [a for a in answers if t <= a.sent_at - start < t + 1]
    latencies = sorted(a.latency_s * 1000 for a in inside)
    return Second(
        t=t, workers=workers, target=target, running=running, requests=len(inside),
        failed=sum(1 for a in inside if a.status != 200),
        p50_ms=_quantile(latencies, 0.5), p99_ms=_quantile(latencies, 0.99),
    )


def _quantile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _print_table(seconds: list[Second]) -> None:
    print(f"{'t_s':>4} {'workers':>7} {'target':>6} {'running':>7} {'req/s':>6} {'failed':>6} "
          f"{'p50_ms':>7} {'p99_ms':>7}")
    for s in seconds:
        print(f"{s.t:>4} {s.workers:>7} {s.target:>6} {s.running:>7} {s.requests:>6} {s.failed:>6} "
              f"{s.p50_ms:>7.0f} {s.p99_ms:>7.0f}")


def _print_summary(seconds: list[Second], args: argparse.Namespace) -> None:
    step, drop = args.before, args.before + args.during
    high = [s for s in seconds if step <= s.t < drop]
    peak = max(s.target for s in high)
    first_up = next((s.t - step for s in high if s.target > 1), None)
    full = next((s.t - step for s in high if s.running == peak), None)
    down = next((s.t - drop for s in seconds if s.t >= drop and s.running == 1), None)
    scaled = [s for s in high if full is not None and s.t - step > full]
    print()
    print(f"load step {args.low} -> {args.high} workers; upscale_delay_s={args.upscale_delay:g}, "
          f"downscale_delay_s={args.downscale_delay:g}")
    print(f"first scale-up visible after {first_up} s; {peak} replicas running after {full} s; "
          f"back to 1 running replica {down} s after the step down")
    # The last second before the step holds requests that were queued behind it.
    print(f"p99 before the step {_worst_p99(seconds[:step - 1]):.0f} ms, "
          f"while scaling {_worst_p99([s for s in high if full is None or s.t - step <= full]):.0f} ms, "
          f"once scaled {_worst_p99(scaled):.0f} ms (worst 1 s window each)")
    print(f"requests {sum(s.requests for s in seconds)}, failed {sum(s.failed for s in seconds)}")


def _worst_p99(seconds: list[Second]) -> float:
    values = [s.p99_ms for s in seconds if s.requests]
    return max(values) if values else float("nan")


def _plot(seconds: list[Second]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no plot)")
        return
    t = [s.t for s in seconds]
    fig, replicas = plt.subplots(figsize=(9, 4))
    replicas.step(t, [s.target for s in seconds], where="post", label="target replicas")
    replicas.step(t, [s.running for s in seconds], where="post", label="running replicas")
    replicas.set_xlabel("s")
    replicas.set_ylabel("replicas")
    latency = replicas.twinx()
    latency.plot(t, [s.p99_ms for s in seconds], color="tab:red", label="p99 ms")
    latency.set_ylabel("p99 latency, ms")
    fig.legend(loc="upper right")
    out = Path(__file__).with_suffix(".png")
    fig.savefig(out, dpi=100)
    print(f"plot: {out}")


if __name__ == "__main__":
    main()
