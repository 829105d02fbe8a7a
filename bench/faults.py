"""Measurement 5: kill -9 under load — the controller, then the proxy.

Under an open-loop 50 req/s load over keep-alive connections:
- controller: SIGKILL the controller process (ours: the gitops controller
  actor; Serve: its ServeController); time until the goal API answers again
  (ours: `get_status`; Serve: `get_serve_instance_details`), and the requests
  that failed meanwhile (the data plane should not notice);
- proxy: SIGKILL the HTTP proxy (ours: every ProxyActor worker of the
  node at once, the whole proxy; Serve: its ProxyActor); time until a fresh
  connection gets a 200 again, and the requests that failed.

    python -m bench.faults [--tiny] [--json PATH] [--kills 2]
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

import httpx

from bench import load, machine, results, stacks, stats


def serves(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def one_kill(stack: stacks.Ours | stacks.Serve, role: str, back: Callable[[], bool], rate: float) -> dict[str, float]:
    """Kill every process of `role` (the proxy's workers all at once) under load."""
    pids = stack.pids()[role]
    if not pids:
        raise RuntimeError(f"no {role} process found")
    with load.PacedLoad(stack.url, rate) as paced:
        time.sleep(2)
        killed = time.perf_counter()
        for pid in pids:
            machine.kill9(pid)
        time.sleep(0.05)  # let the kill land before asking
        recovered = stacks.poll(back, 120, f"{role} back", interval_s=0.01)
        # Wait until every replacement is a running process again before the next kill.
        stacks.poll(lambda: len(now := stack.pids()[role]) == len(pids) and not set(now) & set(pids), 60,
                    f"new {role}", interval_s=0.1)
        time.sleep(2)
    return {"recovery_s": recovered - killed, **load.summary(paced.answers())}


def measure(system: str, kills: int, rate: float) -> dict[str, Any]:
    stack = stacks.start(system, replicas=1)
    checks = {"controller": stack.goal_api_answers, "proxy": lambda: serves(stack.url)}
    figures: dict[str, Any] = {}
    try:
        for role, back in checks.items():
            runs = [one_kill(stack, role, back, rate) for _ in range(kills)]
            figures[role] = {
                "recovery_s": stats.spread(r["recovery_s"] for r in runs),
                "failed": sum(r["failed"] for r in runs),
                "requests": sum(r["requests"] for r in runs),
                "runs": runs,
            }
    finally:
        stack.close()
    return figures


def main() -> int:
    parser = results.parser(__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=2)
    parser.add_argument("--rate", type=float, default=50.0)
    args = parser.parse_args()
    kills = 1 if args.tiny else args.kills
    figures: dict[str, Any] = {"kills": kills, "rate": args.rate}
    for system in stacks.systems("faults", args.tiny):
        figures[system] = measure(system, kills, args.rate)
        for role, got in figures[system].items():
            print(f"{system:<6} kill -9 {role:<10}: back in {got['recovery_s']['median']:.2f} s "
                  f"(max {got['recovery_s']['max']:.2f}); failed {got['failed']} of {got['requests']}")
    results.write(args.json, "faults", args.tiny, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
