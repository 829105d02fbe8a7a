"""How loading, validating and planning scale with the number of specs.

For 10, 100, 1,000 and 5,000 backends (each with one endpoint, one spec file
per service, as a real repo would hold them) it builds a real git repository
in a temp dir and prints:

- cold load+validate of HEAD (`gitops.specs.loading.Loader.load_commit`, a fresh loader),
- plan against an empty actual state (first deploy) and against an equal
  one (the steady state; a fresh copy, as the controller would report it),
- the unchanged re-plan an agent tick pays: a cached load of the same
  commit plus the plan against an equal actual state,
- peak Python memory (tracemalloc) of a cold load plus a plan,
- the growth factor of each time per 10x more specs (10 = linear).

Targets on the 2-core dev machine: 1,000 specs load+validate+plan < 1 s,
linear growth, unchanged re-plan < 10 ms. With `--profile N` it prints
where the cold load of the N-spec repo spends its time (cProfile slows the
load down several times; the shares are what matter).
Prints figures only; never asserts on time.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import subprocess
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vocabulary.configs import ServingState  # noqa: E402
from gitops.specs.loading import Loader  # noqa: E402
from gitops.planning import plan  # noqa: E402

SIZES = (10, 100, 1_000, 5_000)
TARGET_1000_S = 1.0
TARGET_REPLAN_S = 0.010

APP = '''\
class Echo:
    def __init__(self, word="hello"):
        self.word = word

    def __call__(self, request):
        return self.word
'''

SPEC = '''\
[backends.svc-{i}]
import_path = "deployments.apps.echo:Echo"
init_args = ["svc-{i}"]
num_replicas = {replicas}
user_config = {{ greeting = "hi {i}" }}
ray_actor_options = {{ num_cpus = 0.1 }}

[endpoints.svc-{i}]
route = "/svc-{i}"
methods = ["GET", "POST"]
traffic = {{ svc-{i} = 1.0 }}
timeout_s = 30
'''


@dataclass(frozen=True)
class Figures:
    size: int
    load_s: float
    plan_empty_s: float
    plan_equal_s: float
    replan_s: float
    cached_load_s: float
    peak_mb: float
    actions: int


def build_repo(root: Path, size: int) -> Path:
    """A real git repo with `size` services, one spec file each, committed."""
    repo = root / f"specs-{size}"
    (repo / "deployments" / "apps").mkdir(parents=True)
    (repo / "deployments" / "apps" / "echo.py").write_text(APP)
    (repo / "deployments" / "apps" / "__init__.py").write_text("")
    for i in range(size):
        (repo / "deployments" / f"svc-{i}.toml").write_text(SPEC.format(i=i, replicas=1 + i % 3))
    git = ["git", "-c", "user.email=bench@example.invalid", "-c", "user.name=bench", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "-m", f"{size} services"], cwd=repo, check=True)
    return repo


def best_of(repeats: int, run: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def cold_load(repo: Path) -> ServingState:
    result = Loader().load_commit(repo, "HEAD", "deployments")
    if result.state is None:
        raise SystemExit(f"bench specs do not load: {[str(e) for e in result.errors[:3]]}")
    return result.state


def measure(repo: Path, size: int) -> Figures:
    repeats = 3 if size <= 1_000 else 1
    load_s = best_of(repeats, lambda: cold_load(repo))
    desired = cold_load(repo)
    # A fresh equal copy: the controller reports its own objects, not ours.
    actual = ServingState.model_validate(desired.model_dump())
    empty = ServingState()
    plan_empty_s = best_of(repeats, lambda: plan(desired, empty))
    plan_equal_s = best_of(repeats, lambda: plan(desired, actual))
    assert not plan(desired, actual), "an equal state must plan nothing"

    loader = Loader()

    def replan() -> None:
        plan(loader.load_commit(repo, "HEAD", "deployments").state, actual)

    replan()  # warm the loader's cache with this commit
    replan_s = best_of(5, replan)
    cached_load_s = best_of(5, lambda: loader.load_commit(repo, "HEAD", "deployments"))
    return Figures(
        size, load_s, plan_empty_s, plan_equal_s, replan_s, cached_load_s, peak_mb(repo), len(plan(desired, empty))
    )


def peak_mb(repo: Path) -> float:
    """Peak traced Python memory of a cold load plus a first-deploy plan."""
    gc.collect()
    tracemalloc.start()
    plan(cold_load(repo), ServingState())
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 1e6


def profile_load(repo: Path, top: int = 20) -> None:
    """Where a cold load of `repo` spends its time, by own time per function."""
    profiler = cProfile.Profile()
    loader = Loader()
    profiler.enable()
    loader.load_commit(repo, "HEAD", "deployments")
    profiler.disable()
    stats = pstats.Stats(profiler)
    print(f"\n-- cold load profile ({repo.name}), top {top} by own time --")
    stats.sort_stats("tottime").print_stats(top)
    print(f"-- same, top {top} by cumulative time --")
    stats.sort_stats("cumulative").print_stats(top)


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:9.1f}"


def print_table(rows: list[Figures]) -> None:
    print("load = cold load+validate; plan∅ / plan= = plan against an empty / equal actual;")
    print("total = load + plan∅; replan = cached load + plan= (an agent tick on an unchanged commit),")
    print("of which cached = the cached load alone; peak = tracemalloc peak of load + plan∅\n")
    header = ["specs", "load ms", "plan∅ ms", "plan= ms", "total ms", "replan ms", "cached ms", "peak MB", "actions"]
    print(" ".join(f"{h:>9}" for h in header))
    for f in rows:
        total = f.load_s + f.plan_empty_s
        print(
            f"{f.size:>9} {ms(f.load_s)} {ms(f.plan_empty_s)} {ms(f.plan_equal_s)} {ms(total)} "
            f"{ms(f.replan_s)} {ms(f.cached_load_s)} {f.peak_mb:9.1f} {f.actions:>9}"
        )


def print_growth(rows: list[Figures]) -> None:
    print("\ngrowth per step (time ratio / size ratio; 1.0 = linear):")
    for smaller, larger in zip(rows, rows[1:]):
        factor = larger.size / smaller.size
        parts = [
            f"{label} {getattr(larger, field) / max(getattr(smaller, field), 1e-9) / factor:5.2f}"
            for label, field in [("load", "load_s"), ("plan∅", "plan_empty_s"), ("plan=", "plan_equal_s"),
                                 ("replan", "replan_s"), ("cached", "cached_load_s"), ("memory", "peak_mb")]
        ]
        print(f"  {smaller.size:>5} → {larger.size:<5} (x{factor:g}): " + ", ".join(parts))


def print_targets(rows: list[Figures]) -> None:
    at_1000 = next((f for f in rows if f.size == 1_000), None)
    if at_1000 is None:
        return
    total = at_1000.load_s + at_1000.plan_empty_s
    print(f"\n1,000 specs load+validate+plan: {total * 1e3:.0f} ms (target < {TARGET_1000_S * 1e3:.0f} ms)"
          f" -> {'met' if total < TARGET_1000_S else 'MISSED'}")
    print(f"1,000 specs unchanged re-plan: {at_1000.replan_s * 1e3:.1f} ms (target < {TARGET_REPLAN_S * 1e3:.0f} ms)"
          f" -> {'met' if at_1000.replan_s < TARGET_REPLAN_S else 'MISSED'}")
    if total >= TARGET_1000_S or at_1000.replan_s >= TARGET_REPLAN_S:
        print("to see where load time goes: bench/plan_scaling.py --sizes 1000 --profile 1000")


def load_average() -> str:
    """The machine is shared: a busy one inflates every wall-clock figure."""
    try:
        return Path("/proc/loadavg").read_text().split(" ", 1)[0]
    except OSError:
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--profile", type=int, metavar="N", help="profile the cold load of the N-spec repo")
    args = parser.parse_args()
    rows: list[Figures] = []
    print(f"load average at start: {load_average()}")
    with tempfile.TemporaryDirectory(prefix="plan-scaling-") as tmp:
        repos = {}
        for size in args.sizes:
            started = time.perf_counter()
            repos[size] = build_repo(Path(tmp), size)
            print(f"built a git repo of {size} specs in {time.perf_counter() - started:.1f} s", flush=True)
        for size in args.sizes:
            rows.append(measure(repos[size], size))
            print(f"measured {size}", flush=True)
        print(f"load average after measuring: {load_average()}\n")
        print_table(rows)
        print_growth(rows)
        print_targets(rows)
        if args.profile is not None:
            profile_load(repos.get(args.profile) or build_repo(Path(tmp), args.profile))


if __name__ == "__main__":
    main()
