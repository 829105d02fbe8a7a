"""`gitops plan`: the changes between two commits' desired states, in apply order.

Offline: loads both commits with `gitops.loading`, plans with
`gitops.planning` and prints the plan (text or `--json`) on stdout. Spec
errors on either side go to stderr as `FILE:LINE:COL: message` with exit 1.
Must not talk to Ray or change anything.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from controller.configs import ServingState
from gitops.errors import UserError
from gitops.loading import load_commit
from gitops.planning import plan

__all__ = ["plan_command"]


def plan_command(args: argparse.Namespace) -> int:
    if args.live:
        # TODO(live plan): needs the controller client's get_state().
        raise UserError("--live is not available yet; plan between commits with --from/--to")
    repo = Path(args.repo)
    if not repo.is_dir():
        raise UserError(f"--repo {args.repo}: no such directory")
    desired, desired_errors = _load(repo, args.to_rev, args.path)
    actual, actual_errors = (ServingState(), []) if args.from_rev is None else _load(repo, args.from_rev, args.path)
    if desired_errors or actual_errors:
        _print_errors(args.from_rev, actual_errors)
        _print_errors(args.to_rev, desired_errors)
        return 1
    assert desired is not None and actual is not None  # no errors means both loaded
    result = plan(desired, actual)
    sys.stdout.write(result.render_json() if args.json else result.render_text())
    return 0


def _load(repo: Path, rev: str, spec_path: str) -> tuple[ServingState | None, list[str]]:
    """One commit's desired state, or its spec errors as printable lines."""
    loaded = load_commit(repo, rev=rev, spec_path=spec_path)
    return loaded.state, [str(error) for error in loaded.errors]


def _print_errors(rev: str | None, errors: list[str]) -> None:
    if not errors:
        return
    count = f"{len(errors)} spec error{'' if len(errors) == 1 else 's'}"
    print(f"gitops plan: {rev} has {count}:", file=sys.stderr)
    for line in errors:
        print(line, file=sys.stderr)
