"""Hostile spec inputs: time and peak memory of loading each (refused or, for
the wide file, accepted). Prints one line per case; no assertions (the
generous ceilings are in tests/security/test_specs_limits.py).

    python bench/hostile_specs.py
"""

from __future__ import annotations

import sys
import time
import tracemalloc
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gitops.specs.limits import MAX_FILE_BYTES, MAX_STRING_BYTES, MAX_TREE_BYTES
from gitops.specs.loading import LoadResult, Loader
from gitops.sources.trees import MemoryTree

ECHO_PY = "class Echo:\n    def __call__(self, request):\n        return 'hi'\n"
HEADER = '[backends.echo]\nimport_path = "apps.echo:Echo"\n'


def tree(specs: dict[str, str]) -> MemoryTree:
    return MemoryTree({"apps/echo.py": ECHO_PY, **{f"deployments/{name}": text for name, text in specs.items()}})


def wide(keys: int) -> str:
    return HEADER + "[backends.echo.user_config]\n" + "".join(f"key{i} = {i}\n" for i in range(keys))


def big_tree() -> dict[str, str]:
    filler = "# " + "x" * (MAX_FILE_BYTES - 100) + "\n"
    return {f"f{i:02d}.toml": filler for i in range(MAX_TREE_BYTES // len(filler) + 1)}


CASES: dict[str, Callable[[], dict[str, str]]] = {
    "40 KB dotted key (20,000 levels)": lambda: {"a.toml": HEADER + "user_config." + ".".join(["a"] * 20_000) + " = 1\n"},
    "40 KB dotted table header": lambda: {"a.toml": "[backends.echo." + ".".join(["a"] * 20_000) + "]\n"},
    "40 KB nested arrays": lambda: {"a.toml": HEADER + "user_config = " + "[" * 20_000 + "]" * 20_000 + "\n"},
    "spec file of 1 MiB + 1 byte": lambda: {"a.toml": HEADER + "#" * (MAX_FILE_BYTES - len(HEADER)) + "\n"},
    "17 spec files of ~1 MiB (tree > 16 MiB)": big_tree,
    "64 KiB + 1 string value": lambda: {"a.toml": HEADER + f'user_config = "{"x" * (MAX_STRING_BYTES + 1)}"\n'},
    "wide file: 60,000 keys (~1 MiB, accepted)": lambda: {"a.toml": wide(60_000)},
    "1 MiB string of 400,000 escapes": lambda: {"a.toml": HEADER + 'user_config = "' + "\\\\" * 400_000 + '"\n'},
}


def measure(specs: dict[str, str]) -> tuple[float, float, LoadResult]:
    started = time.perf_counter()
    result = Loader().load_tree(tree(specs))
    elapsed = time.perf_counter() - started
    tracemalloc.start()
    try:
        Loader().load_tree(tree(specs))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return elapsed, peak, result


def main() -> None:
    print(f"{'case':<46} {'time':>9} {'peak':>10}  outcome")
    for label, build in CASES.items():
        specs = build()
        elapsed, peak, result = measure(specs)
        outcome = "accepted" if result.ok else str(result.errors[0]).split(": ", 1)[1][:60]
        print(f"{label:<46} {elapsed * 1000:7.1f} ms {peak / 2**20:7.1f} MiB  {outcome}")


if __name__ == "__main__":
    main()
