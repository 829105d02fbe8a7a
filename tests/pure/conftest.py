"""The pure tier runs without Ray, git, SQLite or HTTP.

After `pytest tests/pure` the session fails if any test (or anything it
imported) loaded one of those libraries: such a test belongs in
tests/component or tests/real. Run with other tiers the check is skipped,
since they load these on purpose.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

FORBIDDEN = ("ray", "git", "sqlite3", "httpx", "uvicorn")
_PURE = Path(__file__).parent.resolve()


def loaded_forbidden(modules: dict[str, object]) -> list[str]:
    """The forbidden top-level packages among `modules`' names."""
    return sorted({name.partition(".")[0] for name in modules} & set(FORBIDDEN))


def _pure_tier_alone(session: pytest.Session) -> bool:
    paths = [Path(item.fspath).resolve() for item in session.items]
    return bool(paths) and all(_PURE in path.parents for path in paths)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _pure_tier_alone(session):
        return
    loaded = loaded_forbidden(sys.modules)
    if loaded:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"\npure tier loaded {', '.join(loaded)}: move the tests that need them "
              "to tests/component", file=sys.stderr)
