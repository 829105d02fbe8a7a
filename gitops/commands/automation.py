"""`gitops automation run [--dry-run]`, and the automation loop of `gitops run`, put together.

Wiring only (the decisions are `gitops.delivery.automation`'s, the look is
`gitops.loop.automation.AutomationRunner`'s):

- the resolver: an `s3://` prefix listed and picked by the automation's rule,
  an `hf://` branch resolved at the Hub with the model's include/exclude, an
  `oci://` tag's manifest digest, or an `oci://` repository's tag list picked
  by its rule (`vocabulary.replicas.oci_tags`) and that tag's digest — the
  very functions of `gitops models resolve` (`gitops.commands.models.digests`,
  `gitops.commands.models.oci`); an S3 model whose objects are listed as last
  time (keys, sizes, times) is not read again to hash it, nor an OCI manifest
  the spec pins already or that was hashed before (a digest names its bytes);
  the registry's credentials are `USER:PASSWORD` from a file
  (`--registry-token-file`, `gitops run --automation-registry-token-file`),
  as `gitops models resolve --token-file` takes them, and never printed;
- the repository: the watched repository's `GitSource` (read a commit's
  spec files, write a commit — signed with the `--signing-key` when one is
  given, `gitops.sources.signing` — push it as a fast-forward with the
  token as the git password for https remotes);
- the pull request: `gitops.delivery.promotion.PullRequestPromoter`, the
  promotion's own GitHub / GitLab code, its API only one the agent allows
  (`--promote-api-url`; none given: the public APIs);
- the failed commits: the agent's history ledger (`--state-dir`).

`gitops automation run` looks at every automation of `automation.toml` (on
`--branch`, default the repository's) once, prints one line each, and with
`--dry-run` the edit it would make as a diff, writing nothing. It exits 1
when any automation's look ended in an error.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from gitops.delivery.automation import Automation, FailedCommit, Pin, failed_commits
from gitops.delivery.promotion import PromotionRequest, PullRequestPromoter
from gitops.errors import UsageError, UserError
from gitops.loop.automation import AutomationLoop, AutomationMetrics, AutomationRunner, is_spec_file
from gitops.printable import printable
from gitops.redaction import Credentials, register_secret
from gitops.sources.repos import GitSource
from gitops.sources.signing import SigningKey, load_signing_key
from gitops.specs.pins.automation import AUTOMATION_PATH, parse_automation
from gitops.specs.pins.pin_edits import DeclaredModel

__all__ = ["RegistryAccess", "SourceRepository", "automation_command", "build_loop", "registry_access", "resolve_pin"]

# The user name a forge wants with a token as the password of an https push.
_TOKEN_USERS = {"github": "x-access-token", "gitlab": "oauth2"}


class SourceRepository:
    """`gitops.loop.automation.Repository` over a `GitSource`."""

    def __init__(
        self, source: GitSource, token: str | None = None, provider: str | None = None,
        signing_key: SigningKey | None = None,
    ) -> None:
        self._source = source
        self._token = token
        self._provider = provider
        self._signing_key = signing_key

    def branch_head(self, branch: str) -> str | None:
        if branch == self._source.branch:
            return self._source.newest().sha if self._source.remote else self._source.branch_head(branch)
        return self._source.branch_head(branch)

    def spec_files(self, commit: str, spec_path: str) -> dict[str, bytes]:
        tree = self._source.tree(self._source.revision(commit))
        if tree.hash(spec_path) is None:
            return {}
        return tree.read_files([path for path in tree.files(spec_path) if is_spec_file(path)])

    def read(self, commit: str, path: str) -> bytes | None:
        tree = self._source.tree(self._source.revision(commit))
        return tree.read_files([path]).get(path) if tree.exists(path) else None

    def commit_file(self, parent: str, path: str, data: bytes, message: str) -> str:
        return self._source.commit_file(parent, path, data, message, self._signing_key)

    def push(self, commit: str, branch: str, provider: str | None = None) -> bool:
        """A fast-forward push; with a token, as the git password (the user name the forge wants with one)."""
        user = _TOKEN_USERS.get(provider or self._provider or "", "git")
        return self._source.push(commit, branch, Credentials(user, self._token) if self._token else None)

    def is_ancestor(self, older: str, newer: str) -> bool:
        return self._source.is_ancestor(older, newer)


# (source, its objects' (key, size, last modified)) -> digest: an unchanged listing is not read again.
DigestCache = dict[tuple[str, tuple[tuple[str, int, str], ...]], str]


def resolve_pin(
    automation: Automation, declared: DeclaredModel, hub_token: str | None = None, digests: DigestCache | None = None,
    registry: RegistryAccess | None = None,
) -> Pin:
    """What `automation`'s reference names now: `gitops models resolve`'s code. With `digests`, an
    S3 model whose objects (keys, sizes, times) are as last time is not read again to hash it."""
    from gitops.commands.models.digests import hub_pin, remote_digest, s3_listing
    from vocabulary.replicas.hub_sources import parse_hub_source
    from vocabulary.replicas.model_digests import source_problem
    from vocabulary.replicas.s3_picks import NoPick, candidates, compile_match, parse_s3_prefix, pick, pinned_source

    where = printable(automation.watch)
    if automation.watch.startswith("oci://"):
        return _oci_pin(automation, declared, registry or RegistryAccess(), digests)
    if automation.watch.startswith("hf://"):
        try:
            source = parse_hub_source(automation.watch)
        except ValueError as error:
            raise UserError(f"{where}: {error}") from None
        pinned = hub_pin(source, declared.include, declared.exclude, hub_token)
        return Pin(pinned.source.url(), pinned.sha256)
    try:
        bucket, prefix = parse_s3_prefix(automation.watch)
        listed = s3_listing(bucket, prefix)
        entry = pick(candidates(listed), automation.pick or "", compile_match(automation.match), automation.kind)
    except (NoPick, ValueError) as error:
        raise UserError(f"{where}: {error}") from None
    url = pinned_source(bucket, prefix, entry)
    problem = source_problem(url)
    if problem is not None:
        raise UserError(f"{printable(url)}: {problem}")
    held = tuple(sorted((item.path, item.size, item.modified.isoformat()) for item in listed
                        if item.path == entry.name or (entry.is_directory and item.path.startswith(entry.name))))
    key = (url, held)
    if digests is not None and key in digests:
        return Pin(url, digests[key])
    digest = remote_digest(url)
    if digests is not None:
        digests[key] = digest
    return Pin(url, digest)


@dataclass(frozen=True)
class RegistryAccess:
    """How the automations reach OCI registries: the credentials (USER:PASSWORD, or None: anonymous),
    the flag a person gives them with (named in the errors that ask for them), the time one look may take."""

    credentials: str | None = None
    flag: str = "--registry-token-file"
    timeout_s: float = 600.0


def registry_access(token_file: str | None, flag: str) -> RegistryAccess:
    """The registry credentials in `token_file` (USER:PASSWORD, given as `flag`), masked from now on
    wherever this process would show them; no file: anonymous pulls."""
    from gitops.commands.models.oci import oci_credentials
    from gitops.redaction import register_secret_value
    from vocabulary.replicas.oci_sources import split_credentials

    credentials = oci_credentials(token_file, flag)
    if credentials is not None:
        register_secret_value(credentials.encode())
        register_secret_value(split_credentials(credentials)[1].encode())
    return RegistryAccess(credentials, flag)


def _oci_pin(automation: Automation, declared: DeclaredModel, access: RegistryAccess,
             digests: DigestCache | None) -> Pin:
    """The manifest an oci:// tag names now (the tag the rule picks, for a repository), and its
    model directory's digest; a manifest pinned already or hashed before is not read again."""
    from gitops.commands.models.oci import oci_pin, oci_tag_digest, oci_tags
    from vocabulary.replicas.oci_sources import parse_oci_reference
    from vocabulary.replicas.oci_tags import NoTag, pick_tag
    from vocabulary.replicas.s3_picks import compile_match

    where = printable(automation.watch)
    try:
        reference = parse_oci_reference(automation.watch)
        named_by = None
        if reference.tag is None:
            tags = oci_tags(reference, access.credentials, access.timeout_s, flag=access.flag)
            tag = pick_tag(tags, automation.pick or "", compile_match(automation.match))
            reference = replace(reference, tag=tag)
            named_by = reference.url()
    except (NoTag, ValueError) as error:
        raise UserError(f"{where}: {error}") from None
    digest = oci_tag_digest(reference, access.credentials, access.timeout_s, flag=access.flag)
    pinned = reference.pinned(digest)
    source = pinned.url()
    if source == declared.source:
        return Pin(source, declared.sha256, named_by)
    key = (source, ())
    if digests is not None and key in digests:
        return Pin(source, digests[key], named_by)
    found = oci_pin(pinned, access.credentials, access.timeout_s, flag=access.flag)
    if digests is not None:
        digests[key] = found.sha256
    return Pin(source, found.sha256, named_by)


def _history_failures(state_dir: Path | None) -> list[FailedCommit]:
    if state_dir is None or not (state_dir / "history.db").exists():
        return []
    from gitops.loop.history import History

    history = History(state_dir / "history.db")
    try:
        return failed_commits(history.recent(1000))
    finally:
        history.close()


def _opener(
    source: GitSource, token: str | None, api_urls: tuple[str, ...], provider: str | None,
    signing_key: SigningKey | None = None,
) -> Callable[[PromotionRequest], str] | None:
    if token is None:
        return None
    repository = SourceRepository(source, token, provider, signing_key)

    def open_request(request: PromotionRequest) -> str:
        return PullRequestPromoter(repository.push, token, api_urls=api_urls).promote(request)

    return open_request


def build_loop(
    source: GitSource, spec_path: str, environment: str | None, token: str | None, api_urls: tuple[str, ...],
    history: object, metrics: AutomationMetrics, registry: RegistryAccess | None = None,
    signing_key: SigningKey | None = None,
) -> AutomationLoop:
    """The loop `gitops run` starts: automation.toml read on the watched branch; every commit
    it writes signed with `signing_key` (`--signing-key`) when one is given."""
    from gitops.loop.history import History

    assert isinstance(history, History)
    source = source.twin()  # the loop's thread never shares the ticks' git processes
    repository = SourceRepository(source, token, signing_key=signing_key)
    runner = _runner(source, repository, spec_path, token, api_urls, lambda: failed_commits(history.recent(1000)),
                     registry or RegistryAccess(flag="--automation-registry-token-file"), signing_key)
    return AutomationLoop(runner, repository, branch=source.branch, environment=environment, metrics=metrics)


def _runner(source: GitSource, repository: SourceRepository, spec_path: str, token: str | None,
            api_urls: tuple[str, ...], failures: Callable[[], list[FailedCommit]],
            registry: RegistryAccess, signing_key: SigningKey | None = None) -> AutomationRunner:
    from gitops.commands.models.digests import hub_token

    digests: DigestCache = {}

    def resolve(automation: Automation, declared: DeclaredModel) -> Pin:
        if len(digests) > 256:
            digests.clear()
        token = hub_token(None) if automation.watch.startswith("hf://") else None
        return resolve_pin(automation, declared, token, digests, registry)

    def open_request(request: PromotionRequest) -> str:
        opener = _opener(source, token, api_urls, request.settings.provider, signing_key)
        assert opener is not None
        return opener(request)

    return AutomationRunner(
        repository, resolve, spec_path=spec_path, default_branch=source.branch,
        open_request=open_request if token is not None else None, failed_commits=failures,
    )


def automation_command(args: argparse.Namespace) -> int:
    token = None
    if args.token_file:
        try:
            token = Path(args.token_file).read_text().strip() or None
        except OSError as error:
            raise UsageError(f"--token-file {printable(args.token_file)}: cannot read it ({error.strerror})") from None
        if token:
            register_secret(token)
    registry = registry_access(getattr(args, "registry_token_file", None), "--registry-token-file")
    given_key = getattr(args, "signing_key", None)
    signing_key = load_signing_key(given_key, "--signing-key") if given_key else None
    state_dir = Path(args.state_dir) if args.state_dir else None
    with tempfile.TemporaryDirectory(prefix="gitops-automation-") as cache:
        source = GitSource(args.repo, args.branch, Path(cache), password=token)
        return _run_once(args, source, token, state_dir, registry, signing_key)


def _run_once(args: argparse.Namespace, source: GitSource, token: str | None, state_dir: Path | None,
              registry: RegistryAccess, signing_key: SigningKey | None) -> int:
    repository = SourceRepository(source, token, signing_key=signing_key)
    runner = _runner(source, repository, args.path, token, tuple(args.api_url or ()),
                     lambda: _history_failures(state_dir), registry, signing_key)
    head = repository.branch_head(source.branch)
    if head is None:
        raise UserError(f"{source.location}: no branch {source.branch}")
    parsed = parse_automation(repository.read(head, AUTOMATION_PATH))
    for error in parsed.errors:
        print(error, file=sys.stderr)
    if parsed.errors:
        return 1
    chosen = [a for a in parsed.automations if not args.name or a.name in args.name]
    if not chosen:
        named = f" named {', '.join(args.name)}" if args.name else ""
        print(f"no automation in {AUTOMATION_PATH} on {source.branch}{named}")
        return 0
    failed = False
    for automation in chosen:
        result = runner.run(automation, dry_run=args.dry_run)
        print(printable(f"{automation.name}: {result.result}: {result.detail}"))
        if result.diff:
            sys.stdout.write(result.diff)
        failed = failed or result.result == "error"
    return 1 if failed else 0
