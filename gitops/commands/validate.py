"""`gitops validate [PATH] [--rev REV] [--root DIR] [--format F] [--max-replicas N]`: offline spec validation.

PATH defaults to `deployments` at the top level of the repository holding the
current directory, so it works from any subdirectory, as git does.

Exit 0 when valid, 1 when invalid, 2 for a usage error, in every format:
- text: every error on stderr as FILE:LINE:COL: message, a one-line summary on stdout, last;
  before it, for a valid tree, what was checked (`Checked`): the spec files, the
  environments each checked on top, the secrets (decrypted with `--age-identity`,
  or only found without it), the models pinned by digest, and the automation the
  environments declare ([promotion], [[sync_windows]]);
- json: one JSON document on stdout (`valid`, counts, `checked`, `errors` with file, line, col, message);
- github: GitHub Actions workflow commands on stdout,
  `::error file=F,line=L,col=C::message`, so errors show on the pull
  request's diff (FILE is relative to the repository root, as Actions wants).
Only reads: the working tree, or with `--rev` a commit of the repository holding PATH.
Offline but for two cases: an hf:// model source naming a branch or tag is
refused, and validate asks the Hub (HF_ENDPOINT, at most 10 s) which commit
it names today, so the error says it (`gitops models resolve` prints the pin);
an oci:// source naming a tag likewise asks the registry (an anonymous pull,
at most 10 s) which manifest digest the tag names today.
`--max-replicas` is the agent's cap on replica counts (default 1,000): pass
the value the agent runs with.

`automation.toml` at the repository root (docs/guides/automation.md), when
there is one, is checked too: its `[automation.NAME]` tables, and that each
`model` names a `[models.NAME]` of the spec files.

Environments (docs/guides/environments.md): without `--environment` the tree is
checked as written and with each `environments/NAME.toml` on top, every
error reported once; `--environment NAME` checks that environment alone.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from dataclasses import dataclass, replace

from gitops.errors import UserError
from gitops.specs.documents import SpecError
from gitops.printable import printable
from gitops.specs.limits import SpecLimits
from gitops.specs.loading import LoadResult, Loader, environment_names
from gitops.sources.trees import CommitTree, DirectoryTree, Tree, find_toplevel
from vocabulary.replicas.hub_sources import HubSource
from vocabulary.replicas.oci_sources import OciReference

__all__ = [
    "validate_command", "default_spec_dir", "Checked", "render_json", "render_github", "escape_data", "escape_property",
]

EXIT_VALID, EXIT_INVALID, EXIT_USAGE = 0, 1, 2
_PIN_TIMEOUT_S = 10.0  # asking the Hub (the registry) which commit (digest) a refused branch (tag) names


def validate_command(args: argparse.Namespace) -> int:
    path = Path(args.path) if args.path is not None else default_spec_dir(Path.cwd())
    args.path = args.path or "deployments"  # the label: the spec path, as the repository names it
    environment = getattr(args, "environment", None)
    try:
        limits = _limits(args.max_replicas)
        tree, spec_path = _tree(path, args.rev, args.root)
        names = [environment] if environment is not None else [None, *environment_names(tree)]
        loaders = [_loader(limits, args.age_identity, name) for name in names]
        results = [loader.load_tree(tree, spec_path) for loader in loaders]
        result = _with_pins(_merged(results))
        result = _with_automation(tree, result)
    except _UsageError as error:
        print(printable(f"gitops validate: {error}"), file=sys.stderr)
        return EXIT_USAGE
    checked = Checked.of(tree, spec_path, names, results, decrypted=bool(args.age_identity))
    if args.format == "json":
        sys.stdout.write(render_json(args.path, result, checked))
    elif args.format == "github":
        sys.stdout.write(render_github(args.path, result))
    else:
        _report(args.path, result, checked)
    return EXIT_VALID if _valid(result) else EXIT_INVALID


def default_spec_dir(cwd: Path) -> Path:
    """`deployments` at the top level of the repository holding `cwd` (relative to
    `cwd`), as git finds its root from any subdirectory; `deployments` outside one."""
    toplevel = find_toplevel(cwd)
    if toplevel is None:
        return Path("deployments")
    return Path(os.path.relpath(toplevel / "deployments", cwd))


class _UsageError(Exception):
    pass


@dataclass(frozen=True)
class Checked:
    """What a run of validate looked at, so that its answer says so."""

    spec_files: int = 0
    environments: tuple[str, ...] = ()
    secrets: tuple[str, ...] = ()
    decrypted: bool = False
    models: tuple[str, ...] = ()
    promotions: tuple[str, ...] = ()  # "dev -> staging", one per environment that promotes
    sync_windows: int = 0

    @classmethod
    def of(
        cls, tree: Tree, spec_path: str, names: list[str | None], results: list[LoadResult], decrypted: bool
    ) -> Checked:
        states = [result.state for result in results if result.state is not None]
        settings = [result.environment for result in results if result.environment is not None]
        files = [path for path in _tree_files(tree, spec_path) if path.endswith(".toml") and not path.startswith("environments/")
                 and path != "automation.toml"]
        return cls(
            spec_files=len(files),
            environments=tuple(name for name in names if name is not None),
            secrets=tuple(sorted({name for state in states for name in state.secrets})),
            decrypted=decrypted,
            models=tuple(sorted({name for state in states for name in state.models})),
            promotions=tuple(
                f"{one.promotion.source} -> {one.promotion.to}" for one in settings if one.promotion is not None
            ),
            sync_windows=sum(len(one.sync_windows) for one in settings),
        )

    def lines(self) -> list[str]:
        """One line per kind of thing checked, for the text answer."""
        environments = (
            f"{', '.join(self.environments)} (each on top of the specs)" if self.environments
            else "none (no environments/NAME.toml)"
        )
        if not self.secrets:
            secrets = "none"
        elif self.decrypted:
            secrets = f"{_listed(self.secrets)}, each decrypted with --age-identity"
        else:
            secrets = f"{_listed(self.secrets)}, files found but not decrypted (pass --age-identity to check they open)"
        models = f"{_listed(self.models)}, each pinned by sha256 (fetched by the agent)" if self.models else "none"
        lines = [
            f"  specs:        {_plural(self.spec_files, 'file')} (keys, types, routes, traffic, imports, code paths)",
            f"  environments: {environments}",
            f"  secrets:      {secrets}",
            f"  models:       {models}",
        ]
        automation = [*(f"promotion {one}" for one in self.promotions)]
        if self.sync_windows:
            automation.append(_plural(self.sync_windows, "sync window"))
        if automation:
            lines.append(f"  automation:   {'; '.join(automation)}")
        return lines

    def json(self) -> dict[str, object]:
        return {
            "spec_files": self.spec_files,
            "environments": list(self.environments),
            "secrets": list(self.secrets),
            "secrets_decrypted": self.decrypted and bool(self.secrets),
            "models": list(self.models),
            "promotions": list(self.promotions),
            "sync_windows": self.sync_windows,
        }


def _tree_files(tree: Tree, spec_path: str) -> list[str]:
    try:
        return tree.files(spec_path) if tree.exists(spec_path) else []
    except OSError:
        return []


def _listed(names: tuple[str, ...]) -> str:
    shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
    return f"{len(names)} ({shown})"


class _DecryptingLoader(Loader):
    """With `--age-identity`: every secret is decrypted too (values are dropped at once)."""

    def __init__(self, limits: SpecLimits, identities: list[object], environment: str | None) -> None:
        super().__init__(limits=limits, environment=environment)
        self._identities = identities

    def load_tree(self, tree: Tree, spec_path: str = "deployments") -> LoadResult:
        from gitops.loop.secrets import SecretsLoader

        return SecretsLoader(super().load_tree, self._identities, b"validate")(tree, spec_path)


def _loader(limits: SpecLimits, identity_files: list[str], environment: str | None) -> Loader:
    if not identity_files:
        return Loader(limits=limits, environment=environment)
    from gitops.loop.secrets import load_identities

    return _DecryptingLoader(limits, load_identities(identity_files), environment)


def _limits(max_replicas: int) -> SpecLimits:
    if max_replicas < 1:
        raise _UsageError(f"--max-replicas must be at least 1, not {max_replicas}")
    return SpecLimits(max_replicas=max_replicas)


def _merged(results: list[LoadResult]) -> LoadResult:
    """The tree's result (the first), with every environment's errors too, each once."""
    errors = sorted({error for result in results for error in result.errors}, key=SpecError.sort_key)
    return LoadResult(results[0].state if not errors else None, tuple(errors))


def _with_automation(tree: Tree, result: LoadResult) -> LoadResult:
    """`automation.toml`'s own errors, and each automation whose model no spec file declares."""
    from gitops.specs.pins.automation import AUTOMATION_PATH, parse_automation, unknown_models

    if not tree.exists(AUTOMATION_PATH):
        return result
    data = tree.read_files([AUTOMATION_PATH]).get(AUTOMATION_PATH, b"")
    parsed = parse_automation(data)
    errors = list(parsed.errors)
    if result.state is not None:
        errors += unknown_models(data, parsed.automations, result.state.models)
    if not errors:
        return result
    merged = sorted({*result.errors, *errors}, key=SpecError.sort_key)
    return LoadResult(None, tuple(merged))


def _with_pins(result: LoadResult) -> LoadResult:
    """Each error refusing an hf:// branch or tag says the commit it names today,
    when the Hub answers, and each refusing an OCI tag the digest it names today,
    when the registry answers an anonymous pull (`gitops models resolve`);
    otherwise it stays as it is."""
    from gitops.commands.models.digests import hub_commit, hub_token
    from gitops.commands.models.oci import oci_tag_digest
    from vocabulary.replicas.hub_sources import moving_revision
    from vocabulary.replicas.oci_sources import moving_tag

    pins: dict[HubSource, str | None] = {}
    tags: dict[OciReference, str | None] = {}
    errors = []
    for error in result.errors:
        moving = moving_revision(error.message)
        if moving is not None and moving not in pins:
            try:
                pins[moving] = hub_commit(moving, hub_token(None), _PIN_TIMEOUT_S)
            except UserError:
                pins[moving] = None
        commit = pins.get(moving) if moving is not None else None
        if commit is not None:
            error = replace(error, message=f"{error.message}; today '{moving.revision}' is commit {commit}")  # type: ignore[union-attr]  # moving is set with commit
        tag = moving_tag(error.message)
        if tag is not None and tag not in tags:
            try:
                tags[tag] = oci_tag_digest(tag, None, _PIN_TIMEOUT_S)
            except UserError:
                tags[tag] = None
        digest = tags.get(tag) if tag is not None else None
        if digest is not None:
            error = replace(error, message=f"{error.message}; today '{tag.tag}' is {digest}")  # type: ignore[union-attr]  # tag is set with digest
        errors.append(error)
    return replace(result, errors=tuple(errors))


def _tree(path: Path, rev: str | None, root: str | None) -> tuple[Tree, str]:
    """The tree to read and the spec path inside it."""
    if root is not None and not Path(root).is_dir():
        raise _UsageError(f"--root {root} is not a directory")
    if rev is not None:
        return _revision_tree(path, rev, root)
    if not path.exists():
        raise _UsageError(f"{path} does not exist")
    base = Path(root) if root is not None else find_toplevel(path) or Path.cwd()
    if not _inside(path, base):
        raise _UsageError(f"{path} is not inside {base}, where import paths resolve from; pass --root")
    spec_path = path.resolve().relative_to(base.resolve()).as_posix()
    return DirectoryTree(base.resolve()), "" if spec_path == "." else spec_path


def _revision_tree(path: Path, rev: str, root: str | None) -> tuple[Tree, str]:
    """PATH names the spec path inside the repository holding it (or holding --root)."""
    anchor = Path(root) if root is not None else _existing_parent(path)
    toplevel = find_toplevel(anchor)
    if toplevel is None:
        raise _UsageError(f"{anchor} is not inside a git repository, so --rev cannot be read")
    if not _inside(path, toplevel):
        raise _UsageError(f"{path} is not inside the repository {toplevel}")
    spec_path = path.resolve().relative_to(toplevel.resolve()).as_posix()
    try:
        return CommitTree(toplevel, rev), "" if spec_path == "." else spec_path
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


def _valid(result: LoadResult) -> bool:
    return result.ok and result.state is not None


def _report(label: str, result: LoadResult, checked: Checked) -> None:
    for error in result.errors:
        print(error, file=sys.stderr)
    # What was checked, then the summary, last (`tail -1` is the verdict), go to
    # stdout so that stderr holds nothing but errors.
    if _valid(result):
        for line in ["Checked:", *checked.lines()]:
            print(printable(line))
    print(printable(_summary(label, result)))


def _summary(label: str, result: LoadResult) -> str:
    if not _valid(result) or result.state is None:
        return f"{label}: {_plural(len(result.errors), 'error')}, invalid"
    backends, endpoints = len(result.state.backends), len(result.state.endpoints)
    return f"{label}: {_plural(backends, 'backend')}, {_plural(endpoints, 'endpoint')}, valid"


def render_json(label: str, result: LoadResult, checked: Checked | None = None) -> str:
    state = result.state if _valid(result) else None
    document = {
        "path": label,
        "valid": state is not None,
        "backends": len(state.backends) if state else None,
        "endpoints": len(state.endpoints) if state else None,
        "checked": (checked or Checked()).json() if state is not None else None,
        "errors": [_error_json(error) for error in result.errors],
    }
    return json.dumps(document, indent=2) + "\n"


def _error_json(error: SpecError) -> dict[str, object]:
    return {"file": error.file, "line": error.line, "col": error.col, "message": error.message}


def render_github(label: str, result: LoadResult) -> str:
    """One `::error` command per error, then the summary as a plain log line."""
    lines = [
        f"::error file={escape_property(printable(error.file))},line={error.line},col={error.col},"
        f"title={escape_property('gitops validate')}::{escape_data(printable(error.message))}"
        for error in result.errors
    ]
    return "\n".join([*lines, _summary(label, result)]) + "\n"


def escape_data(text: str) -> str:
    """A workflow command's message: %, CR and LF escaped (GitHub's rules)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value: the message escapes, plus ':' and ','."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
