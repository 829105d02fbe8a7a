"""Measurement 8: memory (PSS) of each process of the serving stack, idle and under load.

Ours: the agent (`gitops run`), the controller, the proxy and a replica.
Serve: its controller, its proxy and a replica (Serve has no agent: CI runs
`serve deploy` and exits). PSS splits shared pages among the processes
sharing them, so the figures add up. Idle is read after the stack settled;
under load is the largest of samples taken while wrk holds 32 connections.
`ray_total` is every process this benchmark's Ray and agent started (Ray's
own daemons included).

    python -m bench.memory [--tiny] [--json PATH]
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

from bench import machine, results, stacks, wrk

ROLES = ("agent", "controller", "proxy", "replica")


def snapshot(stack: stacks.Ours | stacks.Serve) -> dict[str, float]:
    """PSS in MB per role (a replica: the mean of the replicas), and of the whole tree."""
    figures = {}
    for role, pids in stack.pids().items():
        sizes = [machine.pss_mb(pid) for pid in pids]
        figures[role] = sum(sizes) / len(sizes) if role == "replica" and sizes else sum(sizes)
    figures["ray_total"] = sum(_pss_or_zero(pid) for pid in machine.descendants(os.getpid()))
    return figures


def _pss_or_zero(pid: int) -> float:
    try:
        return machine.pss_mb(pid)
    except (OSError, ValueError):
        return 0.0  # gone meanwhile, or not ours to read


def under_load(stack: stacks.Ours | stacks.Serve, seconds: float) -> dict[str, float]:
    loader = threading.Thread(target=wrk.run, args=(stack.url, seconds, 32, 0), daemon=True)
    loader.start()
    time.sleep(1)
    peak: dict[str, float] = {}
    while loader.is_alive():
        for role, value in snapshot(stack).items():
            peak[role] = max(peak.get(role, 0.0), value)
        time.sleep(0.5)
    return peak


def measure(system: str, load_s: float) -> dict[str, Any]:
    stack = stacks.start(system, replicas=1)
    try:
        time.sleep(3)
        return {"idle": snapshot(stack), "load": under_load(stack, load_s)}
    finally:
        stack.close()


def main() -> int:
    parser = results.parser(__doc__.splitlines()[0])
    parser.add_argument("--load-seconds", type=float, default=8.0)
    args = parser.parse_args()
    figures: dict[str, Any] = {}
    for system in stacks.systems("memory", args.tiny):
        got = figures[system] = measure(system, 3.0 if args.tiny else args.load_seconds)
        for state in ("idle", "load"):
            parts = "  ".join(f"{role} {got[state].get(role, float('nan')):6.1f}" for role in (*ROLES, "ray_total"))
            print(f"{system:<6} {state:<5} PSS MB: {parts}")
    results.write(args.json, "memory", args.tiny, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
