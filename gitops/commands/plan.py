"""`gitops plan`: the changes between two desired states, in apply order.

Offline by default: loads the `--from` and `--to` commits with
`gitops.specs.loading` (an empty state when `--from` is absent). With `--live` the
"from" side is what the running controller is configured with, read through
`controller.client.connect` (never starting a controller). Prints the plan
(text or `--json`) on stdout; spec errors go to stderr as
`FILE:LINE:COL: message` with exit 1. Must not change anything.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from vocabulary.configs import ServingState
from gitops.errors import UserError
from gitops.specs.loading import Loader
from gitops.planning import plan

__all__ = ["plan_command"]


def plan_command(args: argparse.Namespace) -> int:
    if args.live and args.from_rev is not None:
        raise UserError("--live plans against the running controller; leave out --from")
    repo = Path(args.repo)
    if not repo.is_dir():
        raise UserError(f"--repo {args.repo}: no such directory")
    loader = Loader()
    desired, desired_errors = _load(loader, repo, args.to_rev, args.path)
    actual, actual_errors = ServingState(), []
    if args.from_rev is not None:
        actual, actual_errors = _load(loader, repo, args.from_rev, args.path)
    if desired_errors or actual_errors:
        _print_errors(args.from_rev, actual_errors)
        _print_errors(args.to_rev, desired_errors)
        return 1
    if args.live:
        actual = _live_state(args.ray_address)
    result = plan(desired, actual)
    sys.stdout.write(result.render_json() if args.json else result.render_text())
    return 0


def _load(loader: Loader, repo: Path, rev: str, spec_path: str) -> tuple[ServingState, list[str]]:
    """One commit's desired state (empty when it has errors) and its errors as printable lines."""
    loaded = loader.load_commit(repo, rev=rev, spec_path=spec_path)
    return loaded.state or ServingState(), [str(error) for error in loaded.errors]


def _print_errors(rev: str | None, errors: list[str]) -> None:
    if not errors:
        return
    count = f"{len(errors)} spec error{'' if len(errors) == 1 else 's'}"
    print(f"gitops plan: {rev} has {count}:", file=sys.stderr)
    for line in errors:
        print(line, file=sys.stderr)


def _live_state(address: str) -> ServingState:
    """What the running controller is configured with; read-only."""
    # Ray is imported only here: the offline plan never pays its start-up.
    from controller.client import connect
    from controller.cluster import init_ray

    try:
        init_ray(address)
    except ConnectionError as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UserError(f"--live: cannot reach Ray at {address}: {first_line}") from None
    try:
        client = connect()
    except LookupError as error:
        raise UserError(f"--live: {error}") from None
    return asyncio.run(client.get_state())
