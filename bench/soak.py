"""`make soak`: a chaos soak — steady mixed load, a seeded random fault every 20-60 s,
memory sampled every 10 s — and docs/reports/soak.md with its table and memory plot.

Drives `bench.soak_world` (the cluster and its faults) and `bench.soak_load`
(the traffic) on the schedule of `bench.soak_plan`, which also judges the
run; exits 1 on any unexplained failed request, a fault never recovered
from, a leaked actor, a memory slope above the stated bound, or a cluster
not serving the branch head at the end.

    python -m bench.soak [--minutes 20] [--seed N] [--doc docs/reports/soak.md] [--kinds a,b]

Not covered: a 2-node cluster. On one machine both nodes share the loopback
address, and the controller starts a proxy on every node at the agent's one
`--proxy-port`; `proxy.shell.shared_ports` refuses the second node's workers that
port by design (a port belongs to one group of workers), so the second node's
proxy cannot start. Node loss stays scenario 9 of `make reliability`
(`ray.cluster_utils.Cluster`, proxies on ports of their own).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from bench import machine, plots
from bench.soak_load import MixedLoad
from bench.soak_plan import (
    ROLES, FaultKind, Injected, Planned, Sample, Soak, render, schedule, slope, verdict,
)
from bench.soak_world import World

RECOVERY_TIMEOUT_S = 180.0
SAMPLES = Path("test-artifacts/soak-samples.jsonl")
SAMPLE_EVERY_S = 10.0


def _wait(check: Callable[[], bool], timeout_s: float, interval_s: float = 0.5) -> float | None:
    """time.monotonic() when `check()` first held, None past the timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return time.monotonic()
        time.sleep(interval_s)
    return None


class Harness:
    def __init__(self, world: World, origin: float, proxy_workers: int, seed: int) -> None:
        self.world = world
        self.origin = origin
        self.proxy_workers = proxy_workers
        self.rng = random.Random(seed + 1)
        self.faults: list[Injected] = []
        self.samples: list[Sample] = []
        self.problems: list[str] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.watchers: list[threading.Thread] = []

    def rel(self, at: float) -> float:
        return round(at - self.origin, 2)

    def whole(self) -> bool:
        return self.world.whole(self.proxy_workers)

    def inject(self, planned: Planned) -> None:
        at = time.monotonic()
        try:
            note = self.world.inject(planned.kind, planned.hold_s, self.rng.randrange(1 << 16))
        except Exception as error:  # noqa: BLE001 — a fault that could not be done is a finding of the soak
            note = f"could not inject: {type(error).__name__}: {error}"
            self.problems.append(f"{planned.kind.value} at {self.rel(at):.0f} s: {note}")
        released = time.monotonic()

        def watch() -> None:
            recovered = _wait(self.whole, RECOVERY_TIMEOUT_S)
            with self.lock:
                self.faults.append(Injected(planned, self.rel(at), self.rel(released),
                                            None if recovered is None else self.rel(recovered), note))
            print(f"[soak] {self.rel(at):7.1f} s {planned.kind.value}: {note}; recovered "
                  f"{'never' if recovered is None else f'in {recovered - released:.1f} s'}", flush=True)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        self.watchers.append(watcher)

    def supervise(self) -> None:
        """Restart an agent that died by itself (counted as a problem), as a supervisor would."""
        while not self.stop.wait(1.0):
            code = self.world.restart_if_exited()
            if code is not None:
                self.problems.append(f"the agent exited by itself ({code}) at {self.rel(time.monotonic()):.0f} s")

    def sample(self) -> None:
        while not self.stop.is_set():
            now = self.rel(time.monotonic())
            for role, pids in self.world.pids().items():
                for pid in pids:
                    try:
                        self.samples.append(Sample(role, pid, now, *machine.pss_and_anonymous_mb(pid)))
                    except (OSError, ValueError):
                        pass  # gone meanwhile
            self.stop.wait(SAMPLE_EVERY_S)


def leaked_actors(world: World) -> list[str]:
    """Replica actors Ray holds that the controller does not list (or lists twice)."""
    import ray

    from controller.client import connect
    from tests.support.stack import run
    from tests.support.faults import leaked_replicas
    from vocabulary.control.goal_api import DEFAULT_NAMESPACE

    os.environ["RAY_AUTH_MODE"] = "disabled"
    ray.init(address=world.head.address, logging_level=logging.ERROR, log_to_driver=False)
    try:
        status = run(connect().get_status())
        leaked = leaked_replicas(DEFAULT_NAMESPACE, status)
        return [f"{leaked} replica actor(s)"] if leaked else []
    finally:
        ray.shutdown()


def soak(minutes: float, seed: int, kinds: list[FaultKind], doc: Path, command: str) -> int:
    duration_s = minutes * 60
    plan = schedule(seed, duration_s, kinds)
    print(f"[soak] seed {seed}, {minutes:g} min, {len(plan)} faults: "
          + ", ".join(f"{p.at:.0f} s {p.kind.name}" for p in plan), flush=True)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        world = World(Path(tmp))
        print(f"[soak] Redis, Ray, the git remote and the agent started in {time.monotonic() - began:.1f} s", flush=True)
        try:
            if _wait(lambda: world.whole(len(world.pids()["proxy worker"]) or -1), 300, 1.0) is None:
                print(f"[soak] the cluster never came up; agent log:\n{(Path(tmp) / 'agent.log').read_text()[-3000:]}")
                return 1
            print(f"[soak] serving after {time.monotonic() - began:.1f} s", flush=True)
            time.sleep(3)  # every proxy worker up, not just the first
            proxy_workers = len(world.pids()["proxy worker"])
            origin = time.monotonic()
            harness = Harness(world, origin, proxy_workers, seed)
            load = MixedLoad(world.proxies, origin)
            load.start()
            background = [threading.Thread(target=harness.supervise, daemon=True),
                          threading.Thread(target=harness.sample, daemon=True)]
            for thread in background:
                thread.start()
            for planned in plan:
                time.sleep(max(0.0, origin + planned.at - time.monotonic()))
                harness.inject(planned)
            time.sleep(max(0.0, origin + duration_s - time.monotonic()))
            for watcher in harness.watchers:
                watcher.join(RECOVERY_TIMEOUT_S + 10)
            load.stop()
            harness.stop.set()
            print(f"[soak] load stopped at {time.monotonic() - began:.1f} s", flush=True)
            requests, failures = load.snapshot()
            serves, note = world.serves_head()
            leaked = leaked_actors(world)
            print(f"[soak] agent log tail:\n{(Path(tmp) / 'agent.log').read_text()[-1500:]}", flush=True)
        finally:
            world.close()
    print(f"[soak] all removed at {time.monotonic() - began:.1f} s", flush=True)
    faults = sorted(harness.faults, key=lambda f: f.at)
    slopes = {role: slope([s for s in harness.samples if s.role == role]) for role in ROLES}
    pss_slopes = {role: slope([s for s in harness.samples if s.role == role], of_pss=True) for role in ROLES}
    doc.parent.mkdir(parents=True, exist_ok=True)
    plot = plots.soak_memory(harness.samples, faults, doc.parent / (doc.stem + "-memory.png"), command)
    result = Soak(seed, minutes, requests, faults, failures, slopes, leaked, serves, note, harness.problems, plot,
                  pss_slopes)
    doc.write_text(render(result, command))
    # Every memory sample, for a closer look at a slope (not committed: test-artifacts/).
    SAMPLES.parent.mkdir(parents=True, exist_ok=True)
    SAMPLES.write_text("".join(json.dumps(asdict(s)) + "\n" for s in harness.samples))
    reasons = verdict(result)
    print(f"[soak] wrote {doc}: {'PASS' if not reasons else 'FAIL: ' + '; '.join(reasons)}", flush=True)
    return 1 if reasons else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=float(os.environ.get("SOAK_MINUTES", "20")))
    parser.add_argument("--seed", type=int, default=int(os.environ.get("SOAK_SEED", "34")))
    parser.add_argument("--doc", type=Path, default=Path("docs/reports/soak.md"))
    parser.add_argument("--kinds", default="", help="comma-separated FaultKind names (default: every kind)")
    args = parser.parse_args()
    kinds = [FaultKind[name.strip().upper()] for name in args.kinds.split(",") if name.strip()] or list(FaultKind)
    if os.geteuid() != 0 and FaultKind.STATE_DIR_FULL in kinds:
        kinds.remove(FaultKind.STATE_DIR_FULL)  # a filesystem of its own needs root (a tmpfs mount)
    command = f"make soak SOAK_MINUTES={args.minutes:g}" if args.doc == Path("docs/reports/soak.md") else \
        f"python -m bench.soak --minutes {args.minutes:g} --seed {args.seed}"
    return soak(args.minutes, args.seed, kinds, args.doc, command)


if __name__ == "__main__":
    sys.exit(main())
