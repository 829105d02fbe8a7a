"""`gitops plan`: the changes between two desired states, in apply order.

Offline by default: loads the `--from` and `--to` commits with
`gitops.specs.loading` (an empty state when `--from` is absent). With `--live` the
"from" side is what the running controller is configured with, read through
`controller.client.connect` (never starting a controller). Prints the plan
on stdout as `--format text|json|markdown` (`--json` = `--format json`;
markdown is a pull-request comment: a summary table and the actions in
apply order, each marked restart or in place); spec errors go to stderr as
`FILE:LINE:COL: message` with exit 1 (and, in markdown, into the comment).
Between two commits, a restarting update names the code files whose change
made its new version (`code changed: deployments/hello.py`).
A backend that reserves GPUs gets a line saying how many the change needs
(`gitops.reconcile.gpus`); with `--live`, how many are free and whether a
rolling update has spare GPUs for its surge replica or goes one replica at a
time, and a bundle larger than any node of the cluster is an error (exit 1).
Exit 0 otherwise, or with `--exit-code` 0 for no change, 2 for changes.
With `--environment NAME` both sides are loaded with `environments/NAME.toml`
on top, the markdown title names the environment, and a sync window holding
new commits now is said after the plan (text and markdown).
Secrets need no key: a secret whose file changed
shows as `~ secret NAME (changed)` (`gitops.loop.secrets.FileDigests`); with
`--live` they are taken as unchanged, since only the agent's key compares values.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import datetime, UTC
from pathlib import Path
from typing import Mapping

from vocabulary.spec.state import ServingState
from gitops.errors import UserError
from gitops.printable import printable_lines
from gitops.loop.secrets import FileDigests, assume_unchanged
from gitops.specs.code import CodeIndex, changed_files
from gitops.specs.loading import LoadResult, Loader
from gitops.sources.trees import CommitTree, Tree
from gitops.reconcile.gpus import capacity_problems, gpu_lines
from gitops.reconcile.planner import plan
from vocabulary.control.status import NodeResources
from gitops.sources.trees import find_toplevel
from gitops.reconcile.plans import Action, ActionKind, Plan
from gitops.delivery.windows import Hold, hold_at

__all__ = ["plan_command", "code_changes", "render_markdown", "render_markdown_errors"]

EXIT_NO_CHANGES, EXIT_ERRORS, EXIT_CHANGES = 0, 1, 2


def plan_command(args: argparse.Namespace) -> int:
    if args.live and args.from_rev is not None:
        raise UserError("--live plans against the running controller; leave out --from")
    repo = Path(args.repo)
    if not repo.is_dir():
        raise UserError(f"--repo {args.repo}: no such directory")
    # Any directory inside the repository will do, as for git; --path is from its top level.
    repo = find_toplevel(repo) or repo
    loader = _SecretFileLoader(environment=args.environment)
    desired, desired_errors, desired_code = _load(loader, repo, args.to_rev, args.path)
    actual: ServingState = ServingState()
    actual_errors: list[str] = []
    actual_code: _CodePaths = {}
    if args.from_rev is not None:
        actual, actual_errors, actual_code = _load(loader, repo, args.from_rev, args.path)
    output = "json" if args.json else (args.format or "text")
    if desired_errors or actual_errors:
        _print_errors(args.from_rev, actual_errors)
        _print_errors(args.to_rev, desired_errors)
        if output == "markdown":
            sys.stdout.write(render_markdown_errors({args.from_rev: actual_errors, args.to_rev: desired_errors}))
        return EXIT_ERRORS
    nodes: Mapping[str, NodeResources] | None = None
    if args.live:
        actual, nodes = _live_state(args.ray_address, args.namespace)
        desired = assume_unchanged(desired, actual)
        too_big = capacity_problems(desired, nodes)
        if too_big:
            loaded = loader.load_commit(repo, rev=args.to_rev, spec_path=args.path)
            errors = [str(loaded.placement_error(name, problem)) for name, problem in too_big.items()]
            _print_errors(args.to_rev, errors)
            if output == "markdown":
                sys.stdout.write(render_markdown_errors({args.to_rev: errors}))
            return EXIT_ERRORS
    result = plan(desired, actual)
    gpus = gpu_lines(result, desired, actual, nodes)
    if args.from_rev is not None and not args.live:
        result = code_changes(result, repo, args.path, (args.from_rev, actual_code), (args.to_rev, desired_code))
    held = _held(loader, repo, args.to_rev, args.path) if args.environment else None
    if output == "markdown":
        markdown = render_markdown(result, "live" if args.live else args.from_rev, args.to_rev, args.environment)
        sys.stdout.write(markdown + "".join(f"\n> {_cell(line)}\n" for line in gpus)
                         + (f"\n> **Held** ({held.reason}): {_cell(held.message)}\n" if held else ""))
    else:
        # Values from the repository may hold C1 controls or bidi marks, which JSON keeps.
        sys.stdout.write(result.render_json() if output == "json" else printable_lines(result.render_text()))
        if gpus and output == "text":
            sys.stdout.write(printable_lines("".join(f"{line}\n" for line in gpus)))
        if held is not None and output == "text":
            sys.stdout.write(printable_lines(f"Held ({held.reason}): {held.message}\n"))
    return EXIT_CHANGES if args.exit_code and result else EXIT_NO_CHANGES


class _SecretFileLoader(Loader):
    """A secret changes when its file does (`gitops.loop.secrets.FileDigests`): no key needed."""

    def load_tree(self, tree: Tree, spec_path: str = "deployments") -> LoadResult:
        return FileDigests(super().load_tree)(tree, spec_path)


_CodePaths = Mapping[str, tuple[str, ...]]


def _load(loader: Loader, repo: Path, rev: str, spec_path: str) -> tuple[ServingState, list[str], _CodePaths]:
    """One commit's desired state (empty when it has errors), its errors as
    printable lines, and each backend's code paths."""
    loaded = loader.load_commit(repo, rev=rev, spec_path=spec_path)
    return loaded.state or ServingState(), [str(error) for error in loaded.errors], loaded.code_paths


def code_changes(
    result: Plan, repo: Path, spec_path: str, before: tuple[str, _CodePaths], after: tuple[str, _CodePaths]
) -> Plan:
    """`result` with each restarting update naming the code files that changed
    between the two commits (none: a code-affecting field changed the version)."""
    trees = {rev: CodeIndex(CommitTree(repo, rev), spec_path) for rev in (before[0], after[0])}

    def files(side: tuple[str, _CodePaths], name: str) -> dict[str, str | None]:
        rev, paths = side
        return {file: digest for path in paths.get(name, ()) for file, digest in trees[rev].files(path).items()}

    actions = [
        action.model_copy(update={"code_changes": tuple(changed_files(files(before, action.name), files(after, action.name)))})
        if action.kind is ActionKind.UPDATE_BACKEND and action.restarts
        else action
        for action in result.actions
    ]
    return Plan(actions=tuple(actions))


def _held(loader: Loader, repo: Path, rev: str, spec_path: str) -> Hold | None:
    """The sync window holding new commits of the loader's environment now, if one does."""
    settings = loader.load_commit(repo, rev=rev, spec_path=spec_path).environment
    return hold_at(settings.sync_windows, datetime.now(UTC)) if settings else None


def _print_errors(rev: str | None, errors: list[str]) -> None:
    if not errors:
        return
    count = f"{len(errors)} spec error{'' if len(errors) == 1 else 's'}"
    print(f"gitops plan: {rev} has {count}:", file=sys.stderr)
    for line in errors:
        print(line, file=sys.stderr)


def _live_state(address: str, namespace: str) -> tuple[ServingState, Mapping[str, NodeResources]]:
    """What the controller running in `namespace` is configured with, and its cluster's nodes; read-only."""
    # Ray is imported only here: the offline plan never pays its start-up.
    from controller.client import connect
    from controller.cluster import init_ray

    try:
        init_ray(address)
    except ConnectionError as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UserError(f"--live: cannot reach Ray at {address}: {first_line}") from None
    try:
        client = connect(namespace)
    except LookupError as error:
        raise UserError(f"--live: {error}") from None

    async def both() -> tuple[ServingState, Mapping[str, NodeResources]]:
        return await client.get_state(), (await client.get_status()).nodes

    return asyncio.run(both())


# --- markdown, for a pull-request comment ----------------------------------------------

_EFFECTS = {
    ActionKind.CREATE_BACKEND: "starts replicas",
    ActionKind.CREATE_ENDPOINT: "new route",
    ActionKind.UPDATE_ENDPOINT: "in place",
    ActionKind.DELETE_ENDPOINT: "route removed",
    ActionKind.DELETE_BACKEND: "stops replicas",
}


def render_markdown(result: Plan, from_rev: str | None, to_rev: str, environment: str | None = None) -> str:
    """The plan as GitHub-flavoured markdown: title, summary table, actions in apply order."""
    where = f" ({_code(environment)})" if environment else ""
    title = f"### ray-gitops plan{where}: {_code(from_rev or 'nothing')} → {_code(to_rev)}"
    if not result:
        return f"{title}\n\nNo changes.\n"
    summary = result.summary()
    lines = [
        title,
        "",
        "| create | update | of which restart | delete |",
        "|---:|---:|---:|---:|",
        f"| {summary.create} | {summary.update} | {summary.restart} | {summary.delete} |",
        "",
        "| # | action | effect | changes |",
        "|---:|---|---|---|",
    ]
    lines += [_action_row(number, action) for number, action in enumerate(result.actions, start=1)]
    return "\n".join([*lines, "", summary.text()]) + "\n"


def _action_row(number: int, action: Action) -> str:
    what = f"{action.kind.verb} {action.kind.noun} {_code(action.name)}"
    details = [_code(detail) for detail in action.details()]
    if action.reason:
        details.append(f"*{_cell(action.reason)}*")
    return f"| {number} | {what} | {_effect(action)} | {'<br>'.join(details)} |"


def _effect(action: Action) -> str:
    if action.kind is ActionKind.UPDATE_BACKEND:
        return "**restart** (rolling update)" if action.restarts else "in place"
    return _EFFECTS[action.kind]


def render_markdown_errors(errors_by_rev: dict[str | None, list[str]]) -> str:
    """The spec errors that stopped a plan, for the same comment."""
    lines = ["### ray-gitops plan: spec errors", ""]
    for rev, errors in errors_by_rev.items():
        if errors:
            lines += [f"{_code(str(rev))} has {len(errors)} error{'' if len(errors) == 1 else 's'}:", "", "```"]
            lines += [error.replace("```", "'''") for error in errors]
            lines += ["```", ""]
    return "\n".join(lines)


def _cell(text: str) -> str:
    """Text inside a table cell: a pipe would end the cell, a newline the row."""
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    # A code span cannot hold its own delimiter; a plan's values rarely hold a backtick.
    return f"`{_cell(text).replace('`', chr(39))}`"
