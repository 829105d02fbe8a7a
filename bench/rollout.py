"""Measurement 4: a code rollout of a 4-replica backend under 50 req/s.

Ours: a commit changing the backend's code (a new version: rolling restart).
Serve: the config PUT with a changed `runtime_env` (a code change to Serve:
its replicas are replaced). An open-loop load of 50 req/s over keep-alive
connections runs from 2 s before the change until 2 s after the system says
it is done; total time is change → done (ours: agent Synced at the commit;
Serve: application RUNNING on the new config), failed requests are every
answer other than 200 (connection errors included).

    python -m bench.rollout [--tiny] [--json PATH] [--rollouts 2] [--replicas 4] [--rate 50]
"""

from __future__ import annotations

import sys
import time
from typing import Any

from bench import load, results, stacks, stats


def one_rollout(stack: stacks.Ours | stacks.Serve, code: str, rate: float) -> dict[str, float]:
    with load.PacedLoad(stack.url, rate) as paced:
        time.sleep(2)
        started, commit = stack.change(code=code)
        done = stack.wait_done(commit) if isinstance(stack, stacks.Ours) else stack.wait_done(started)
        stacks.poll(lambda: stacks.answer(stack.http, stack.url).get("code") == code, 60, f"code {code} answers")
        time.sleep(2)
    return {"total_s": done - started, **load.summary(paced.answers())}


def measure(system: str, rollouts: int, replicas: int, rate: float) -> dict[str, Any]:
    stack = stacks.start(system, replicas=replicas)
    try:
        runs = [one_rollout(stack, str(i + 1), rate) for i in range(rollouts)]
    finally:
        stack.close()
    return {
        "total_s": stats.spread(r["total_s"] for r in runs),
        "failed": sum(r["failed"] for r in runs),
        "requests": sum(r["requests"] for r in runs),
        "p99_ms": stats.spread(r["p99_ms"] for r in runs),
        "runs": runs,
    }


def main() -> int:
    parser = results.parser(__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=2)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--rate", type=float, default=50.0)
    args = parser.parse_args()
    rollouts, replicas = (1, 2) if args.tiny else (args.rollouts, args.replicas)
    figures: dict[str, Any] = {"replicas": replicas, "rate": args.rate, "rollouts": rollouts}
    for system in stacks.systems("rollout", args.tiny):
        got = figures[system] = measure(system, rollouts, replicas, args.rate)
        print(f"{system:<6} rollout of {replicas}: total {got['total_s']['median']:.2f} s "
              f"(min {got['total_s']['min']:.2f}, max {got['total_s']['max']:.2f}); "
              f"failed {got['failed']} of {got['requests']}")
    results.write(args.json, "rollout", args.tiny, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
