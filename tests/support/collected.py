"""A pytest plugin that writes what was collected, one JSON line per test.

Loaded with `-p tests.support.collected` and `GITOPS_COLLECTED=<file>`; each
line holds the test's node id, its repository-relative path, its marks and,
in `starts_ray`, why it starts Ray (`tiers.starts_ray` over its fixture
closure and the source of its function and of our fixtures it uses).
"""

from __future__ import annotations

import inspect
import json
import os
import textwrap
from pathlib import Path

import pytest

from tests.support.tiers import starts_ray

ROOT = Path(__file__).resolve().parents[2]


def _source(func: object) -> str | None:
    """The source of `func` if it is one of ours under tests/."""
    func = inspect.unwrap(func)  # type: ignore[arg-type]
    try:
        path = Path(inspect.getsourcefile(func) or "").resolve()  # type: ignore[arg-type]
    except TypeError:
        return None
    if ROOT / "tests" not in path.parents:
        return None
    return textwrap.dedent(inspect.getsource(func))  # type: ignore[arg-type]


def describe(item: pytest.Item) -> dict[str, object]:
    sources: list[str] = []
    function = getattr(item, "function", None)
    if function is not None and (source := _source(function)):
        sources.append(source)
    fixtureinfo = getattr(item, "_fixtureinfo", None)
    for defs in (fixtureinfo.name2fixturedefs.values() if fixtureinfo else ()):
        for fixturedef in defs:
            if source := _source(fixturedef.func):
                sources.append(source)
    return {
        "nodeid": item.nodeid,
        "path": Path(str(item.path)).resolve().relative_to(ROOT).as_posix(),
        "marks": sorted({mark.name for mark in item.iter_markers()}),
        "starts_ray": starts_ray(getattr(item, "fixturenames", ()), sources),
    }


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    with open(os.environ["GITOPS_COLLECTED"], "w") as out:
        for item in items:
            out.write(json.dumps(describe(item)) + "\n")
