"""Which tag of an OCI repository an automation follows (`pick = "semver"` or `"highest-version"`), and the tag list's pages.

An automation watching `oci://REGISTRY/REPO` (no tag; `gitops.specs.pins.automation`,
docs/guides/automation.md) reads the repository's tag list (the distribution
API's `GET /v2/<name>/tags/list`) and picks one tag, as Flux's image policies
and Argo CD Image Updater's `semver` strategy do; the pin is then the digest
of the manifest that tag names (`gitops.commands.models.oci`). The rules:

- **Semantic versions** (semver.org 2.0.0): `MAJOR.MINOR.PATCH`, each a number
  without leading zeros, with an optional `-PRERELEASE` and `+BUILD`, and an
  optional leading `v` (`v1.4.0`). A tag that is not one (`latest`, `1.4`,
  `sha-3f2a…`) is passed over.
- **`match`** (optional regex, found anywhere in the tag, as `re.search`):
  only the tags it finds are candidates.
- **Pre-releases** (`1.5.0-rc.1`) are passed over — a release candidate is
  never proposed by accident — unless `match` reaches into the pre-release
  part: what it finds ends after the version's `-`. So `^v1[.]` follows the
  1.x releases only, `^v1[.].*-rc[.]` only 1.x's release candidates, and `.*`
  every tag, releases and pre-releases (the highest wins: 1.5.0 is above
  1.5.0-rc.2).
- **Highest** by semver precedence: numbers compare as numbers; a
  pre-release is below its release; pre-release identifiers compare one by
  one (numeric below alphanumeric, numbers as numbers, text as ASCII) and a
  shorter list is lower. Build metadata does not count, so two tags of the
  same version (`1.4.0+a` and `1.4.0+b`, or `v1.4.0` and `1.4.0`) are a tie:
  an error naming both, never a silent choice.

With `pick = "highest-version"` the tag whose version number is highest, read
as an `s3://` prefix's entries are (`vocabulary.replicas.s3_picks.version_of`):
the numbers in the tag, in order, compared as numbers (`build-9` < `build-10`,
`1.9` < `1.10`); when `match` has a group named `version`, or else a first
group, only that group's text (so `^main-(?P<version>[0-9]{14})-` follows the
newest `main-20261204093000-3f2a` build by its timestamp). Tags without a
number are passed over; two tags with the same version are an error naming
both. This is the rule for tags that are no semantic versions: build
numbers, dates, timestamps (Flux's `numerical` and timestamp `alphabetical`
policies, Argo CD Image Updater's tags sorted by name).

The tag list comes in pages: a registry that has more sends a `Link: <URL>;
rel="next"` header; `next_page` reads it, refusing a next page on another
host (the credentials go only to the registry that was named). Values only:
the command does the I/O, within `MAX_TAG_PAGES` and `MAX_TAGS`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from vocabulary.replicas.oci_sources import OciReference, registry_base
from vocabulary.replicas.s3_picks import highest_version

__all__ = [
    "MAX_TAGS",
    "MAX_TAG_PAGES",
    "NoTag",
    "TAG_PAGE_SIZE",
    "TAG_PICKS",
    "SemVer",
    "next_page",
    "page_tags",
    "parse_semver",
    "pick_tag",
    "tags_url",
]

TAG_PICKS = ("semver", "highest-version")
TAG_PAGE_SIZE = 1000  # `n` asked of the registry per page (it may send fewer)
MAX_TAG_PAGES = 100  # pages of one tag list read at most
MAX_TAGS = 100_000  # tags of one repository read at most: a longer list is an error, never a partial pick

_SEMVER = re.compile(
    r"v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(?:-((?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
)
_NEXT = re.compile(r'<([^>]*)>\s*;[^,]*?\brel="?next"?', re.IGNORECASE)


@dataclass(frozen=True)
class SemVer:
    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...] = ()

    def key(self) -> tuple[int, int, int, bool, tuple[tuple[int, int, str], ...]]:
        """Sorts as semver precedence: a release above its pre-releases, identifiers one by one."""
        identifiers = tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in self.prerelease)
        return (self.major, self.minor, self.patch, not self.prerelease, identifiers)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}" + (f"-{'.'.join(self.prerelease)}" if self.prerelease else "")


def parse_semver(tag: str) -> SemVer | None:
    """The semantic version a tag is (a leading `v` allowed), or None."""
    found = _SEMVER.fullmatch(tag)
    if found is None:
        return None
    major, minor, patch, prerelease, _build = found.groups()
    return SemVer(int(major), int(minor), int(patch), tuple(prerelease.split(".")) if prerelease else ())


class NoTag(ValueError):
    """No single tag: the message says why (none is a version, none matches, a tie)."""


def pick_tag(tags: Iterable[str], rule: str, match: re.Pattern[str] | None = None) -> str:
    """The tag `rule` picks from the repository's tags; NoTag says why there is none."""
    if rule not in TAG_PICKS:
        raise NoTag(f"pick must be one of {', '.join(TAG_PICKS)} for an oci:// repository")
    listed = sorted(set(tags))
    if not listed:
        raise NoTag("the repository has no tag")
    chosen = [tag for tag in listed if match is None or match.search(tag)]
    if not chosen:
        raise NoTag(f"none of its {_count(listed)} matches '{match.pattern if match else ''}': {_some(listed)}")
    if rule == "highest-version":
        return _highest_version(chosen, match)
    versions = {tag: parse_semver(tag) for tag in chosen}
    candidates = {tag: version for tag, version in versions.items()
                  if version is not None and _lets_in(tag, version, match)}
    if not candidates:
        what = ("a release MAJOR.MINOR.PATCH (a pre-release counts only when match reaches into its '-')"
                if match is None and any(versions.values()) else "a semantic version MAJOR.MINOR.PATCH")
        raise NoTag(f"none of its {_count(chosen)}{' matching' if match else ''} is {what}: {_some(chosen)}")
    highest = max(version.key() for version in candidates.values())
    top = [tag for tag, version in candidates.items() if version.key() == highest]
    if len(top) > 1:
        raise NoTag(f"{_some(top)} are the same version {candidates[top[0]]}: narrow them with match")
    return top[0]


def _highest_version(chosen: list[str], match: re.Pattern[str] | None) -> str:
    highest, top = highest_version(chosen, match)
    if highest is None:
        raise NoTag(f"none of its {_count(chosen)}{' matching' if match else ''} has a version number: {_some(chosen)}")
    if len(top) > 1:
        raise NoTag(f"{_some(top)} have the same version {'.'.join(map(str, highest))}: narrow them with match")
    return top[0]


def _lets_in(tag: str, version: SemVer, match: re.Pattern[str] | None) -> bool:
    """A release always; a pre-release when `match` finds text past its `-` (the first `-` of a version)."""
    if not version.prerelease:
        return True
    found = match.search(tag) if match is not None else None
    return found is not None and found.end() > tag.index("-")


def tags_url(reference: OciReference, page_size: int = TAG_PAGE_SIZE) -> str:
    """The first page of the repository's tag list."""
    return f"{registry_base(reference.registry)}/{reference.repository}/tags/list?n={page_size}"


def page_tags(body: bytes) -> list[str]:
    """The tags of one page of `tags/list` (`{"name": …, "tags": [...]}`; null tags: none)."""
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise ValueError("the registry's tag list is not JSON") from None
    tags = document.get("tags") if isinstance(document, dict) else None
    if tags is None and isinstance(document, dict):
        return []
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise ValueError("the registry's tag list has no list of tags")
    return tags


def next_page(url: str, link: str | None) -> str | None:
    """The next page's URL a `Link` header names (relative to `url`), or None at the last page;
    ValueError for a next page on another scheme or host than `url`'s."""
    if not link:
        return None
    found = _NEXT.search(link)
    if found is None:
        return None
    following = urljoin(url, found.group(1))
    here, there = urlsplit(url), urlsplit(following)
    if (here.scheme, here.netloc) != (there.scheme, there.netloc):
        raise ValueError(f"the registry's next page of tags is on another host ({there.netloc[:80]!r}): refused")
    return following


def _count(tags: list[str]) -> str:
    return f"{len(tags)} tag{'s' if len(tags) != 1 else ''}"


def _some(tags: list[str]) -> str:
    shown = ", ".join(tags[:5])
    return shown + (f" and {len(tags) - 5} more" if len(tags) > 5 else "")
