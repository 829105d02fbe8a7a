"""Which model under an S3 prefix `gitops models resolve s3://BUCKET/PREFIX/` pins, by a rule.

A training pipeline publishes each model as a new object (`…/sentiment-1.4.0.onnx`)
or a new directory (`…/v3/`) under one prefix; resolve picks one of them and
prints the pinned `source` and `sha256` (docs/guides/models.md). The rules,
applied to the entries directly under the prefix, as `aws s3 ls` shows them:

- **The entries**: each object directly under the prefix is a file (`a.onnx`);
  each next path segment is a directory (`v3/`, holding every object under it).
  A zero-byte folder marker (`v3/` itself) is no entry.
- **`--match REGEX`** (optional): an entry is a candidate when the regex is
  found in its name (relative to the prefix; a directory's ends in `/`).
- **`--kind file|directory`** (optional): only files, or only directories.
  Without it, the candidates must all be of one kind (the prefix holds
  model files, or model directories): both kinds is an error naming `--kind`.
- **`--pick newest`**: the entry last modified latest (a directory's time is
  its newest object's).
- **`--pick highest-version`**: the entry whose version is highest. The version
  is the numbers in the name, compared in order as a sequence (natural sort):
  `v2` < `v10`, `1.9.3` < `1.10.0`, `2026-11-20` < `2026-12-01`; letters do not
  count, so `1.2.0-rc1` is (1, 2, 0, 1), above 1.2.0 (leave such names out with
  `--match`). When the regex has a group named `version`, or else a first group,
  only that group's text is read. A candidate without a number has no version
  and is passed over.
- A tie (two candidates last modified in the same instant, or with the same
  version) is an error naming both, never a silent choice.

Also the pinned source's URL and the lines printed. Values only: the command
(`gitops.commands.models.digests`) lists the store and computes the digest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import quote, unquote, urlsplit

__all__ = [
    "KINDS",
    "PICKS",
    "Candidate",
    "Listed",
    "NoPick",
    "candidates",
    "compile_match",
    "parse_s3_prefix",
    "pick",
    "pin_lines",
    "pinned_source",
    "store_error_line",
    "highest_version",
    "version_of",
]

PICKS = ("newest", "highest-version")
KINDS = ("file", "directory")
_NUMBER = re.compile(r"[0-9]+")


class NoPick(ValueError):
    """No single candidate: the message says why (none matched, a tie, both kinds)."""


@dataclass(frozen=True)
class Listed:
    """One object of the listing: its key relative to the prefix, and when it was last modified."""

    path: str
    size: int
    modified: datetime


@dataclass(frozen=True)
class Candidate:
    """An entry directly under the prefix: a file, or a directory (its name ends in `/`)."""

    name: str
    modified: datetime  # a directory's: its newest object's

    @property
    def is_directory(self) -> bool:
        return self.name.endswith("/")


def parse_s3_prefix(reference: str) -> tuple[str, str]:
    """`s3://BUCKET/PREFIX/` as (bucket, prefix with its `/`, or "" for the whole bucket); ValueError says what is wrong."""
    parts = urlsplit(reference)
    if parts.scheme != "s3" or not parts.netloc:
        raise ValueError("resolve takes s3://BUCKET/PREFIX/")
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not hold credentials; S3 takes them from the AWS_* variables")
    if parts.query or parts.fragment:
        raise ValueError("must have no query or fragment")
    prefix = unquote(parts.path.lstrip("/"))
    if prefix and not prefix.endswith("/"):
        raise ValueError("resolve takes a prefix ending in '/' (s3://BUCKET/PREFIX/): a key names one object already")
    return parts.netloc, prefix


def candidates(listed: Iterable[Listed]) -> list[Candidate]:
    """The entries directly under the prefix, sorted by name."""
    objects = [item for item in listed if item.path and not item.path.endswith("/")]
    folders = {item.path.split("/", 1)[0] for item in objects if "/" in item.path}
    newest: dict[str, datetime] = {}
    for item in objects:
        if "/" in item.path:
            name = item.path.split("/", 1)[0] + "/"
        elif item.path in folders and item.size == 0:
            continue  # a folder marker the store lists without its '/'
        else:
            name = item.path
        if name not in newest or item.modified > newest[name]:
            newest[name] = item.modified
    return [Candidate(name, modified) for name, modified in sorted(newest.items())]


def compile_match(pattern: str | None) -> re.Pattern[str] | None:
    """`--match`'s regex; ValueError names what is wrong with it."""
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as error:
        raise ValueError(f"--match '{pattern}': not a regular expression ({error})") from None


def version_of(name: str, match: re.Pattern[str] | None = None) -> tuple[int, ...] | None:
    """The numbers in `name` (or in `match`'s version group), in order; None without any."""
    text: str | None = name
    if match is not None and match.groups:
        found = match.search(name)
        if found is None:
            return None
        text = found.group("version") if "version" in match.groupindex else found.group(1)
    numbers = tuple(int(number) for number in _NUMBER.findall(text or ""))
    return numbers or None


def pick(
    entries: Iterable[Candidate], rule: str, match: re.Pattern[str] | None = None, kind: str | None = None
) -> Candidate:
    """The one candidate `rule` picks; NoPick says why there is none."""
    if rule not in PICKS:
        raise NoPick(f"--pick must be one of {', '.join(PICKS)}")
    listed = list(entries)
    if not listed:
        raise NoPick("no object under the prefix")
    chosen = [entry for entry in listed if match is None or match.search(entry.name)]
    if not chosen:
        raise NoPick(f"none of the {_count(listed)} under the prefix matches --match '{match.pattern}'" if match
                     else "no entry under the prefix")
    if kind is not None:
        chosen = [entry for entry in chosen if entry.is_directory == (kind == "directory")]
        if not chosen:
            raise NoPick(f"no {kind} under the prefix{' matches --match' if match else ''}")
    elif len({entry.is_directory for entry in chosen}) > 1:
        files = [entry.name for entry in chosen if not entry.is_directory]
        folders = [entry.name for entry in chosen if entry.is_directory]
        raise NoPick(f"the prefix holds both files ({_some(files)}) and directories ({_some(folders)}): "
                     "pass --kind file or --kind directory")
    if rule == "newest":
        best = max(entry.modified for entry in chosen)
        top = [entry for entry in chosen if entry.modified == best]
        if len(top) > 1:
            raise NoPick(f"{_some([e.name for e in top])} were last modified at the same time ({best.isoformat()}): "
                         "narrow them with --match, or --pick highest-version")
        return top[0]
    highest, top_names = highest_version([entry.name for entry in chosen], match)
    if highest is None:
        raise NoPick(f"none of the {_count(chosen)} has a version number in its name: {_some([e.name for e in chosen])}")
    top = [entry for entry in chosen if entry.name in top_names]
    if len(top) > 1:
        raise NoPick(f"{_some([e.name for e in top])} have the same version {'.'.join(map(str, highest))}: "
                     "narrow them with --match")
    return top[0]


def highest_version(
    names: Iterable[str], match: re.Pattern[str] | None = None
) -> tuple[tuple[int, ...] | None, list[str]]:
    """The highest version (`version_of`) among `names`, and the names that have it (more than one: a tie);
    (None, []) when none has a version. An OCI repository's tags are picked by it too (`oci_tags`)."""
    versions = {name: version for name in names if (version := version_of(name, match)) is not None}
    if not versions:
        return None, []
    highest = max(versions.values())
    return highest, [name for name, version in versions.items() if version == highest]


def pinned_source(bucket: str, prefix: str, entry: Candidate) -> str:
    """The `source` that names `entry` (a directory's ends in `/`), its key quoted as a URL's path."""
    return f"s3://{bucket}/{quote(prefix + entry.name, safe='/:@+=,!$&()*;')}"


def pin_lines(source: str, sha256: str, extra: Mapping[str, list[str]] | None = None) -> str:
    """The TOML lines to paste into a `[models.NAME]` table (strings as TOML basic strings)."""
    lines = [f"source = {json.dumps(source)}", f"sha256 = {json.dumps(sha256)}"]
    lines += [f"{key} = {json.dumps(values)}" for key, values in (extra or {}).items() if values]
    return "".join(line + "\n" for line in lines)


def store_error_line(text: str) -> str:
    """An S3 store's error (obstore's text, its debug dump cut off) as a short phrase."""
    text = " ".join(text.split("Debug source:")[0].split())
    if "NoSuchBucket" in text:
        return "no such bucket"
    if "AccessDenied" in text or "403" in text or "401" in text or "InvalidAccessKeyId" in text:
        return "access denied (403): check the AWS_* credentials"
    if "404" in text:
        return "not found (404)"
    if "timed out" in text.lower() or "timeout" in text.lower():
        return "timed out"
    return text[:300]


def _count(entries: list[Candidate]) -> str:
    return f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}"


def _some(names: list[str], most: int = 3) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")
