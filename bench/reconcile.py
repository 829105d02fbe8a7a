"""Measurement 6: what a reconcile costs the agent, by repository size.

For 10, 100, 1,000, 5,000 and 10,000 specs (one service per file: a backend
and its endpoint, as a real repository holds them) it builds a real git
repository in a temp dir and times what the agent does (`gitops.specs.loading.Loader`
then `gitops.reconcile.planner.plan`, the agent's load and plan steps):

- cold: load+validate HEAD with a fresh loader, plan against nothing (first deploy);
- unchanged tick: load the same commit again (cached, through the open
  repository the agent keeps) and plan against an equal actual state (a
  fresh copy, as the controller reports it) — every resync tick pays this;
- one-file change: a commit changing one spec's `user_config`, loaded with
  the cache warm from its parent and planned against the parent's state;
- memory: the Python heap's peak (tracemalloc) during a cold load+plan, and
  what stays held afterwards (the loader's cache);

each the median of `--repeats` runs with min and max, and the growth per 10x
more specs (1.0 = linear). With `--profile N`, where a cold load of N specs
spends its time. Prints figures; asserts nothing about time.

    python -m bench.reconcile [--tiny] [--json PATH] [--sizes 10 100 1000 5000 10000] [--repeats 3]
"""

from __future__ import annotations

import cProfile
import gc
import pstats
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable

import git

from bench import results, stats
from gitops.reconcile.planner import plan
from gitops.sources.trees import CommitTree
from gitops.specs.loading import Loader
from vocabulary.spec.state import ServingState

SIZES = (10, 100, 1_000, 5_000, 10_000)
SPEC_PATH = "deployments"

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
user_config = {{ greeting = "{greeting}" }}
ray_actor_options = {{ num_cpus = 0.1 }}

[endpoints.svc-{i}]
route = "/svc-{i}"
methods = ["GET", "POST"]
traffic = {{ svc-{i} = 1.0 }}
timeout_s = 30
'''

GIT = ["git", "-c", "user.email=bench@example.invalid", "-c", "user.name=bench", "-c", "commit.gpgsign=false"]


def spec(i: int, greeting: str = "") -> str:
    return SPEC.format(i=i, replicas=1 + i % 3, greeting=greeting or f"hi {i}")


def build_repo(root: Path, size: int) -> Path:
    """A real git repo with `size` services, one spec file each, committed."""
    repo = root / f"specs-{size}"
    (repo / SPEC_PATH / "apps").mkdir(parents=True)
    (repo / SPEC_PATH / "apps" / "echo.py").write_text(APP)
    (repo / SPEC_PATH / "apps" / "__init__.py").write_text("")
    for i in range(size):
        (repo / SPEC_PATH / f"svc-{i}.toml").write_text(spec(i))
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    subprocess.run([*GIT, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*GIT, "commit", "-q", "-m", f"{size} services"], cwd=repo, check=True)
    return repo


def change_one_file(repo: Path, serial: int) -> None:
    (repo / SPEC_PATH / "svc-0.toml").write_text(spec(0, greeting=f"changed {serial}"))
    subprocess.run([*GIT, "commit", "-q", "-am", f"change {serial}"], cwd=repo, check=True)


def load(loader: Loader, repo: Path | git.Repo) -> ServingState:
    """Load HEAD as the agent does: its loader, its open repository (a path opens a new one)."""
    result = loader.load_tree(CommitTree(repo, "HEAD"), SPEC_PATH)
    if result.state is None:
        raise SystemExit(f"bench specs do not load: {[str(e) for e in result.errors[:3]]}")
    return result.state


def timed(run: Callable[[], object]) -> float:
    gc.collect()
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def cold(repo: Path) -> None:
    plan(load(Loader(), repo), ServingState())


def measure(repo: Path, size: int, repeats: int) -> dict[str, Any]:
    cold_s = [timed(lambda: cold(repo)) for _ in range(repeats)]
    loader, opened = Loader(), git.Repo(repo)  # the agent's, kept from tick to tick: warm from here on
    desired = load(loader, opened)
    actual = ServingState.model_validate(desired.model_dump())  # equal, not the same objects
    if plan(desired, actual):
        raise SystemExit("an equal state must plan nothing")
    unchanged_s = [timed(lambda: plan(load(loader, opened), actual)) for _ in range(max(repeats, 5))]
    changed_s = []
    for serial in range(repeats):
        parent = ServingState.model_validate(load(loader, opened).model_dump())
        change_one_file(repo, serial)
        changed_s.append(timed(lambda: plan(load(loader, opened), parent)))  # noqa: B023 — timed at once
    peak_mb, held_mb = memory_mb(repo)
    return {
        "specs": size, "cold_s": stats.spread(cold_s), "unchanged_s": stats.spread(unchanged_s),
        "one_file_s": stats.spread(changed_s), "peak_mb": peak_mb, "held_mb": held_mb,
        "actions": len(plan(desired, ServingState())),
    }


def memory_mb(repo: Path) -> tuple[float, float]:
    """Peak Python heap of a cold load+plan, and what the loader still holds after it."""
    gc.collect()
    tracemalloc.start()
    loader = Loader()
    plan(load(loader, repo), ServingState())
    gc.collect()
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 1e6, held / 1e6


def growth(rows: list[dict[str, Any]], field: str) -> list[dict[str, float]]:
    """Per 10x more specs, how much more `field` costs, divided by 10 (1.0 = linear)."""
    by_size = {r["specs"]: r for r in rows}
    steps = []
    for size, row in sorted(by_size.items()):
        larger = by_size.get(size * 10)
        if larger is not None:
            ratio = larger[field]["median"] / max(row[field]["median"], 1e-9) / 10
            steps.append({"from": size, "to": size * 10, "growth": ratio})
    return steps


def profile_load(repo: Path, top: int = 20) -> None:
    """Where a cold load of `repo` spends its time, by own and by cumulative time."""
    profiler = cProfile.Profile()
    loader = Loader()
    profiler.enable()
    load(loader, repo)
    profiler.disable()
    stats_ = pstats.Stats(profiler)
    print(f"\n-- cold load profile ({repo.name}), top {top} by own time --")
    stats_.sort_stats("tottime").print_stats(top)
    print(f"-- same, top {top} by cumulative time --")
    stats_.sort_stats("cumulative").print_stats(top)


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'specs':>7}{'cold ms':>11}{'unchanged ms':>14}{'one-file ms':>13}{'peak MB':>9}{'held MB':>9}")
    for r in rows:
        print(f"{r['specs']:>7}{r['cold_s']['median'] * 1e3:>11.1f}{r['unchanged_s']['median'] * 1e3:>14.2f}"
              f"{r['one_file_s']['median'] * 1e3:>13.1f}{r['peak_mb']:>9.1f}{r['held_mb']:>9.1f}")


def main() -> int:
    parser = results.parser(__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", type=int, metavar="N", help="profile the cold load of the N-spec repo")
    args = parser.parse_args()
    sizes, repeats = ((10, 100), 1) if args.tiny else (tuple(args.sizes), args.repeats)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-reconcile-") as tmp:
        for size in sizes:
            repo = build_repo(Path(tmp), size)
            rows.append(measure(repo, size, repeats))
            print(f"measured {size} specs", file=sys.stderr, flush=True)
        if args.profile is not None:
            profile_load(build_repo(Path(tmp) / "profile", args.profile))
    print_table(rows)
    figures: dict[str, Any] = {"rows": rows, "repeats": repeats,
               "growth": {field: growth(rows, field) for field in ("cold_s", "unchanged_s", "one_file_s")}}
    for field, steps in figures["growth"].items():
        print(f"growth per 10x, {field}: " + ", ".join(f"{s['from']}→{s['to']} {s['growth']:.2f}" for s in steps))
    results.write(args.json, "reconcile", args.tiny, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
