"""`gitops models digest PATH|URL` and `gitops models resolve REF`: what to commit in a `[models.NAME]` table.

`digest` prints the digest of PATH, a local file or directory (file:///… is
the same), or of what s3://bucket/key, s3://bucket/prefix/ or https://
(http:// on loopback) holds, as a node's cache checks it
(`gitops.commands.models.digests`). Nothing is written.

`resolve` pins a moving reference: `hf://ORG/NAME@BRANCH_OR_TAG` (or a
commit) becomes the `source` at the commit the Hub names for it today and
the `sha256` of the selection `--include`/`--exclude` make
(`vocabulary.replicas.hub_sources`), printed as the TOML lines to commit.
`resolve s3://BUCKET/PREFIX/ --pick newest|highest-version [--match REGEX]
[--kind file|directory]` pins one model a pipeline published under a prefix:
it lists the prefix with obstore (the same AWS_* variables as `digest`),
picks a file or a directory by the rule (`vocabulary.replicas.s3_picks`,
pure), and prints its `source` and the digest `digest` computes for it.
`resolve oci://REGISTRY/REPO:TAG` pins an OCI tag: the manifest's digest
and the model directory's (`gitops.commands.models.oci`);
`resolve oci://REGISTRY/REPO --pick semver [--match REGEX]` first picks the
tag as artifact automation does (`vocabulary.replicas.oci_tags`). Malformed
arguments (a bad regex, no --pick) exit 2 as usage errors; what the store
says (no such bucket, access denied, nothing matches) exits 1 like every
`GitopsError`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from urllib.parse import unquote, urlsplit

from gitops.commands.models.digests import hub_pin, hub_token, local_digest, remote_digest, s3_listing
from gitops.errors import UsageError, UserError
from gitops.printable import printable
from vocabulary.replicas.hub_sources import parse_hub_source
from vocabulary.replicas.model_digests import source_problem
from vocabulary.replicas.s3_picks import (
    PICKS,
    NoPick,
    candidates,
    compile_match,
    parse_s3_prefix,
    pick,
    pin_lines,
    pinned_source,
)

__all__ = ["models_command"]


def models_command(args: argparse.Namespace) -> int:
    if args.models_verb == "resolve":
        return _resolve(args)
    target: str = args.target
    if target.startswith("hf://"):
        raise UserError(f"{printable(target)}: an hf:// model's digest is its selection's: `gitops models resolve` prints it")
    if target.startswith("oci://"):
        raise UserError(f"{printable(target)}: an oci:// model's digest is its image's model directory's: "
                        "`gitops models resolve` prints it")
    parts = urlsplit(target)
    if parts.scheme == "file":
        path = Path(unquote(parts.path))
    elif parts.scheme in ("s3", "http", "https"):
        problem = source_problem(target)
        if problem is not None:
            raise UserError(f"{printable(target)}: {problem}")
        print(remote_digest(target))
        return 0
    else:
        path = Path(target)
    print(local_digest(path))
    return 0


def _resolve(args: argparse.Namespace) -> int:
    reference: str = args.reference
    if reference.startswith("s3://"):
        return _resolve_s3(args)
    if reference.startswith("oci://"):
        return _resolve_oci(args)
    if not reference.startswith("hf://"):
        raise UserError(
            f"{printable(reference)}: resolve takes hf://ORG/NAME@REVISION, s3://BUCKET/PREFIX/ or "
            "oci://REGISTRY/REPO:TAG"
        )
    for flag in ("pick", "match", "kind"):
        if getattr(args, flag, None) is not None:
            raise UsageError(f"--{flag} is for an s3:// prefix; an hf:// revision names one commit")
    try:
        source = parse_hub_source(reference)
    except ValueError as error:
        raise UserError(f"{printable(reference)}: {error}") from None
    token = hub_token(args.token_file)
    pin = hub_pin(source, tuple(args.include), tuple(args.exclude), token)
    print(pin_lines(pin.source.url(), pin.sha256, {"include": args.include, "exclude": args.exclude}), end="")
    return 0


def _resolve_oci(args: argparse.Namespace) -> int:
    """The manifest an OCI tag names today (or the tag `--pick semver|highest-version` picks among the repository's),
    and its model directory's digest (`gitops.commands.models.oci`)."""
    from dataclasses import replace

    from gitops.commands.models.oci import oci_credentials, oci_pin, oci_tags
    from vocabulary.replicas.oci_sources import parse_oci_reference
    from vocabulary.replicas.oci_tags import TAG_PICKS, NoTag, pick_tag

    reference: str = args.reference
    for flag, given in (("include", args.include), ("exclude", args.exclude), ("kind", args.kind)):
        if given:
            raise UsageError(f"--{flag} is not for an oci:// image: its model is the image's /models or its files")
    try:
        parsed = parse_oci_reference(reference)
        match = compile_match(args.match)
    except ValueError as error:
        raise UsageError(f"{printable(reference)}: {error}") from None
    named = parsed.tag is not None or parsed.digest is not None
    if named and (args.pick or args.match):
        raise UsageError(f"{printable(reference)}: --pick and --match choose among a repository's tags: "
                         "name no tag (oci://REGISTRY/REPO --pick semver)")
    if not named and args.pick not in TAG_PICKS:
        raise UsageError(f"{printable(reference)}: name a tag (oci://REGISTRY/REPO:TAG), a digest (@sha256:…), "
                         "or --pick semver or --pick highest-version to pick among the repository's tags")
    credentials = oci_credentials(args.token_file)
    if not named:
        try:
            tag = pick_tag(oci_tags(parsed, credentials, 600.0), args.pick, match)
        except NoTag as error:
            raise UserError(f"{printable(reference)}: {error}") from None
        parsed = replace(parsed, tag=tag)
        rule = "semantic version" if args.pick == "semver" else "version number"
        print(f"# {printable(parsed.url())}: the highest {rule} among the repository's tags")
    pin = oci_pin(parsed, credentials)
    print(pin_lines(pin.reference.url(), pin.sha256), end="")
    return 0


def _resolve_s3(args: argparse.Namespace) -> int:
    """The model under an S3 prefix that `--pick` (`vocabulary.replicas.s3_picks`) names, and its digest."""
    reference: str = args.reference
    where = printable(reference)
    for flag, given in (("include", args.include), ("exclude", args.exclude), ("token-file", args.token_file)):
        if given:
            raise UsageError(f"--{flag} is for an hf:// repository; an s3:// model is every object under its source")
    if args.pick is None:
        raise UsageError(f"{where}: say which model under the prefix to pin: --pick newest or --pick highest-version")
    if args.pick not in PICKS:
        raise UsageError(f"{where}: --pick {args.pick} picks an oci:// repository's tags; an s3:// prefix takes "
                         "--pick newest or --pick highest-version")
    try:
        bucket, prefix = parse_s3_prefix(reference)
        match = compile_match(args.match)
    except ValueError as error:
        raise UsageError(f"{where}: {error}") from None
    try:
        entry = pick(candidates(s3_listing(bucket, prefix)), args.pick, match, args.kind)
    except NoPick as error:
        raise UserError(f"{where}: {error}") from None
    source = pinned_source(bucket, prefix, entry)
    problem = source_problem(source)
    if problem is not None:
        raise UserError(f"{printable(source)}: {problem}")
    print(pin_lines(source, remote_digest(source)), end="")
    return 0
