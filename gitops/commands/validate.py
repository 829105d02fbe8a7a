"""`gitops validate [PATH] [--rev REV] [--root DIR]`: offline spec validation.

Exit 0 when valid (a one-line summary on stdout), 1 when invalid (every
error on stderr as FILE:LINE:COL: message), 2 for a usage error. Only reads:
the working tree, or with `--rev` a commit of the repository holding PATH.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gitops.errors import UserError
from gitops.specs.loading import LoadResult, Loader
from gitops.sources.trees import find_toplevel

__all__ = ["validate_command"]

EXIT_VALID, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


def validate_command(args: argparse.Namespace) -> int:
    path = Path(args.path)
    try:
        result = _load(path, args.rev, args.root)
    except _UsageError as error:
        print(f"gitops validate: {error}", file=sys.stderr)
        return EXIT_USAGE
    return _report(args.path, result)


class _UsageError(Exception):
    pass


def _load(path: Path, rev: str | None, root: str | None) -> LoadResult:
    if root is not None and not Path(root).is_dir():
        raise _UsageError(f"--root {root} is not a directory")
    if rev is not None:
        return _load_revision(path, rev, root)
    if not path.exists():
        raise _UsageError(f"{path} does not exist")
    base = Path(root) if root is not None else find_toplevel(path) or Path.cwd()
    if not _inside(path, base):
        raise _UsageError(f"{path} is not inside {base}, where import paths resolve from; pass --root")
    return Loader().load_directory(path, base)


def _load_revision(path: Path, rev: str, root: str | None) -> LoadResult:
    """PATH names the spec path inside the repository holding it (or holding --root)."""
    anchor = Path(root) if root is not None else _existing_parent(path)
    toplevel = find_toplevel(anchor)
    if toplevel is None:
        raise _UsageError(f"{anchor} is not inside a git repository, so --rev cannot be read")
    if not _inside(path, toplevel):
        raise _UsageError(f"{path} is not inside the repository {toplevel}")
    spec_path = path.resolve().relative_to(toplevel.resolve()).as_posix()
    try:
        return Loader().load_commit(toplevel, rev, "" if spec_path == "." else spec_path)
    except UserError as error:
        raise _UsageError(str(error)) from None


def _existing_parent(path: Path) -> Path:
    """At a commit PATH may not exist in the working tree; its repo still does."""
    candidate = path.resolve()
    while not candidate.exists():
        candidate = candidate.parent
    return candidate


def _inside(path: Path, root: str | Path) -> bool:
    return path.resolve().is_relative_to(Path(root).resolve())


def _report(label: str, result: LoadResult) -> int:
    if not result.ok or result.state is None:
        for error in result.errors:
            print(error, file=sys.stderr)
        count = len(result.errors)
        # The summary goes to stdout so that stderr holds nothing but errors.
        print(f"{label}: {_plural(count, 'error')}, invalid")
        return EXIT_INVALID
    state = result.state
    backends, endpoints = len(state.backends), len(state.endpoints)
    print(f"{label}: {_plural(backends, 'backend')}, {_plural(endpoints, 'endpoint')}, valid")
    return EXIT_VALID


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
