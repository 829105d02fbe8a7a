"""Measurement 3: a lightweight change, from the operator's action to effective at the proxy.

- ours, traffic: `git commit` moving /echo's traffic between two backends,
  until the proxy answers from the other one;
- ours, user_config: `git commit` of a new `user_config`, until a replica
  answers with it (reconfigured in place, no restart);
- serve, user_config: the changed config `PUT` to Serve's REST API (what
  `serve deploy` sends), until a replica answers with it.

The clock starts just before `git commit` / the PUT and stops at the first
answer showing the change (polled every 2 ms). Prints figures; asserts nothing.

    python -m bench.update_latency [--tiny] [--json PATH] [--changes 10]
"""

from __future__ import annotations

import sys
import time
from typing import Any

from bench import results, stacks, stats


def timed_changes(stack: stacks.Ours | stacks.Serve, kind: str, changes: int) -> list[float]:
    """Seconds from each change to its first effective answer."""
    seconds = []
    for i in range(changes):
        if kind == "traffic":
            to = "green" if i % 2 == 0 else "blue"
            started, _ = stack.change(to=to)
            seen = stacks.poll(lambda to=to: stacks.answer(stack.http, stack.url).get("label") == to, 120,
                               f"traffic to {to}")
        else:
            label = f"c{i + 1}"
            started, _ = stack.change(config=label)
            seen = stacks.poll(lambda label=label: (stacks.answer(stack.http, stack.url).get("config") or {}).get("label")
                               == label,
                               120, f"user_config {label}")
        seconds.append(seen - started)
        time.sleep(0.3)  # let the previous change settle everywhere before the next
    return seconds


def measure(system: str, changes: int) -> dict[str, Any]:
    stack = stacks.start(system, replicas=1, two_backends=system == "ours")
    try:
        kinds = ("traffic", "user_config") if system == "ours" else ("user_config",)
        return {kind: _figures(timed_changes(stack, kind, changes)) for kind in kinds}
    finally:
        stack.close()


def _figures(seconds: list[float]) -> dict[str, Any]:
    return {"seconds": stats.spread(seconds), "samples": seconds}


def main() -> int:
    parser = results.parser(__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=10)
    args = parser.parse_args()
    changes = 2 if args.tiny else args.changes
    figures: dict[str, Any] = {"changes": changes}
    for system in stacks.systems("update_latency", args.tiny):
        figures[system] = measure(system, changes)
        for kind, got in figures[system].items():
            s = got["seconds"]
            print(f"{system:<6} {kind:<12} p50 {s['median'] * 1e3:8.1f} ms   min {s['min'] * 1e3:8.1f}   "
                  f"max {s['max'] * 1e3:8.1f}   n={s['n']}")
    results.write(args.json, "update_latency", args.tiny, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
