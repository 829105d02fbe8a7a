"""Hostile spec sizes and shapes: each is refused with its location, nothing is
loaded (so nothing can be applied), and refusing costs bounded time and memory.

The bounds here are generous ceilings against a blow-up (the quadratic
locator took 1.6 GB and 5.6 s on 40 KB); bench/hostile_specs.py prints the
real figures.
"""

from __future__ import annotations

import time
import tracemalloc
from typing import Callable, Iterator

import pytest

from gitops.sources.trees import MemoryTree
from gitops.specs.loading import Loader, LoadResult

ECHO_PY = "class Echo:\n    def __call__(self, request):\n        return 'hi'\n"
HEADER = '[backends.echo]\nimport_path = "apps.echo:Echo"\n'
SECONDS, BYTES = 5.0, 200 * 2**20
# The documented limits (docs/guides/security.md), written out: they are the contract.
MAX_DEPTH, MAX_FILE_BYTES, MAX_TREE_BYTES, MAX_STRING_BYTES = 32, 2**20, 16 * 2**20, 64 * 2**10


def load(specs: dict[str, str | bytes]) -> LoadResult:
    return Loader().load_tree(MemoryTree({"apps/echo.py": ECHO_PY, **{f"deployments/{k}": v for k, v in specs.items()}}))


def errors(result: LoadResult) -> list[str]:
    return [str(error) for error in result.errors]


def bounded(run: Callable[[], LoadResult]) -> LoadResult:
    """Run `run` twice: once timed (under SECONDS), once traced (peak under
    BYTES); tracing slows allocation-heavy code several times, so not both at once."""
    started = time.perf_counter()
    result = run()
    elapsed = time.perf_counter() - started
    assert elapsed < SECONDS, f"took {elapsed:.1f}s"
    tracemalloc.start()
    try:
        run()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < BYTES, f"peaked at {peak / 2**20:.0f} MiB"
    return result


def test_a_40_kb_deeply_dotted_key_is_refused_at_its_line_quickly_and_in_little_memory() -> None:
    deep = "user_config." + ".".join(["a"] * 20_000) + " = 1\n"
    result = bounded(lambda: load({"deep.toml": HEADER + deep}))
    assert result.state is None
    assert errors(result) == [f"deployments/deep.toml:3:1: values nest more than {MAX_DEPTH} levels deep"]


def test_a_deeply_dotted_table_header_is_refused_at_its_line() -> None:
    header = "[backends.echo." + ".".join(["a"] * 20_000) + "]\nx = 1\n"
    result = bounded(lambda: load({"deep.toml": header}))
    assert errors(result) == [f"deployments/deep.toml:1:1: values nest more than {MAX_DEPTH} levels deep"]


def test_deeply_nested_arrays_are_refused_at_the_element_past_the_limit() -> None:
    nested = "user_config = " + "[" * 20_000 + "]" * 20_000 + "\n"
    result = bounded(lambda: load({"deep.toml": HEADER + nested}))
    # backends.echo.user_config is 3 levels; the array opens at column 15 and
    # its element 30 levels down, past the limit, at column 15 + 30.
    assert errors(result) == [f"deployments/deep.toml:3:45: values nest more than {MAX_DEPTH} levels deep"]


class CountingTree(MemoryTree):
    """A memory tree that remembers which files were read."""

    def __init__(self, files: dict[str, bytes | str]) -> None:
        super().__init__(files)
        self.reads: list[str] = []

    def read(self, path: str) -> bytes:
        self.reads.append(path)
        return super().read(path)


def test_a_spec_file_over_one_mib_is_refused_without_being_read() -> None:
    big = HEADER + "# " + "x" * MAX_FILE_BYTES + "\n"
    tree = CountingTree({"apps/echo.py": ECHO_PY, "deployments/big.toml": big})
    result = bounded(lambda: Loader().load_tree(tree))
    assert errors(result) == [
        f"deployments/big.toml:1:1: file is {len(big)} bytes; a spec file may have at most 1 MiB"
    ]
    assert "deployments/big.toml" not in tree.reads


def test_spec_files_over_sixteen_mib_together_are_refused_at_the_file_past_the_limit() -> None:
    filler = "# " + "x" * (MAX_FILE_BYTES - 100) + "\n"
    count = MAX_TREE_BYTES // len(filler) + 1
    files = {f"deployments/f{index:02d}.toml": filler for index in range(count)}
    tree = CountingTree({"apps/echo.py": ECHO_PY, **files})
    result = bounded(lambda: Loader().load_tree(tree))
    last = f"deployments/f{count - 1:02d}.toml"
    assert errors(result) == [
        f"{last}:1:1: spec files reach {count * len(filler)} bytes here; together they may have at most 16 MiB"
    ]
    assert last not in tree.reads


def test_a_string_value_over_64_kib_is_refused_at_its_key() -> None:
    long = "x" * (MAX_STRING_BYTES + 1)
    result = load({"echo.toml": HEADER + f'user_config = {{ note = "{long}" }}\n'})
    assert result.state is None
    assert errors(result) == [
        f"deployments/echo.toml:3:17: backends.echo.user_config.note: string is {len(long)} bytes; "
        "a string may have at most 64 KiB"
    ]


def test_a_key_over_64_kib_is_refused_at_its_table() -> None:
    long = "k" * (MAX_STRING_BYTES + 1)
    result = load({"echo.toml": HEADER + f'[backends.echo.user_config]\n"{long}" = 1\n'})
    assert errors(result) == [
        f"deployments/echo.toml:3:1: backends.echo.user_config: a key is {len(long)} bytes; "
        "a string may have at most 64 KiB"
    ]


def wide_spec(keys: int) -> Iterator[str]:
    yield HEADER + "[backends.echo.user_config]\n"
    for index in range(keys):
        yield f"key{index} = {index}\n"


def test_a_spec_of_twenty_thousand_keys_loads_in_bounded_time_and_memory() -> None:
    text = "".join(wide_spec(20_000))
    result = bounded(lambda: load({"wide.toml": text}))
    assert result.ok


@pytest.mark.parametrize("value", ["inf", "-inf", "nan"])
def test_a_number_that_is_not_finite_is_refused_anywhere_in_a_file(value: str) -> None:
    result = load({"echo.toml": HEADER + f"user_config = {{ scale = [1.0, {value}] }}\n"})
    assert result.state is None
    shown = {"inf": "inf", "-inf": "-inf", "nan": "nan"}[value]
    assert errors(result) == [
        f"deployments/echo.toml:3:31: backends.echo.user_config.scale[1]: must be a finite number (got {shown})"
    ]
