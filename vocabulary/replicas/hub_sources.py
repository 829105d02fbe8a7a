"""What an `hf://ORG/NAME@REVISION` model source is, and which of its files a model holds.

A Hugging Face Hub source (docs/guides/models.md) names a repository and a
revision that must be a full commit hash: a branch or a tag moves, a
commit does not, so the bytes git pins stay the bytes every node fetches.
`hub_source_problem` refuses anything else with a message that says which
command prints the pin (`gitops models resolve`), and `moving_revision`
reads that message back, so the one command-line shell that can look the
revision up (`gitops validate`) adds the hash it names today. A model is a
selection of the revision's files: `include` and `exclude` globs, with the
Hub client's own rules (fnmatch, where `*` crosses `/`; a pattern ending in
`/` means everything under it), and its digest is the manifest digest of the
selection, as for any directory (`vocabulary.replicas.model_digests`).

Also owns the Hub's HTTP API as values: the endpoint (`HF_ENDPOINT`, else
huggingface.co; plain http only on loopback), the URLs of a revision's
metadata and of a file at a commit, and the metadata's parsing. The replica
(`replica.fetching.hub`) and the CLI (`gitops models resolve`) do the I/O.
Values only.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

__all__ = [
    "COMMIT",
    "DEFAULT_ENDPOINT",
    "endpoint_in",
    "token_in",
    "HubFile",
    "HubRevision",
    "HubSource",
    "endpoint_problem",
    "file_url",
    "hub_source_problem",
    "moving_revision",
    "parse_hub_source",
    "parse_revision",
    "pinned",
    "revision_url",
    "selected",
    "token_path",
]

DEFAULT_ENDPOINT = "https://huggingface.co"
COMMIT = re.compile(r"[0-9a-f]{40}")
# The Hub's repository names: an owner and a name of letters, digits, '.', '_' and '-'.
_PART = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?")
_REVISION = re.compile(r"[A-Za-z0-9._/-]{1,255}")
_MOVING = re.compile(r"the revision '([^']+)' of (hf://[^ @]+) is not a full commit hash")


@dataclass(frozen=True)
class HubSource:
    repo: str  # ORG/NAME
    revision: str

    def url(self) -> str:
        return f"hf://{self.repo}@{self.revision}"


@dataclass(frozen=True)
class HubFile:
    path: str  # relative to the repository's root, '/'-separated
    size: int
    sha256: str | None  # the Hub's LFS files say theirs; small files are plain git blobs


@dataclass(frozen=True)
class HubRevision:
    commit: str
    files: tuple[HubFile, ...]


def parse_hub_source(source: str) -> HubSource:
    """`hf://ORG/NAME@REVISION` as its parts; ValueError says what is wrong."""
    if not source.startswith("hf://"):
        raise ValueError("must start with hf://")
    rest = source[len("hf://") :]
    repo, at, revision = rest.partition("@")
    if not at or not revision:
        raise ValueError(f"needs a revision: hf://{repo or 'ORG/NAME'}@COMMIT (a 40-hex commit hash)")
    parts = repo.split("/")
    if len(parts) != 2 or not all(_PART.fullmatch(part) for part in parts) or ".." in repo:
        raise ValueError(f"names a repository as ORG/NAME (letters, digits, '.', '_', '-'), not {repo!r}")
    if _REVISION.fullmatch(revision) is None or ".." in revision:
        raise ValueError(f"has no usable revision ({revision[:60]!r})")
    return HubSource(repo, revision)


def hub_source_problem(source: str) -> str | None:
    """Why an hf:// source cannot be pinned in git, or None: it must name ORG/NAME
    at a full commit hash; a branch or tag is refused, naming the command that pins it."""
    try:
        parsed = parse_hub_source(source)
    except ValueError as error:
        return str(error)
    if COMMIT.fullmatch(parsed.revision):
        return None
    if COMMIT.fullmatch(parsed.revision.lower()):
        return "the commit hash must be lower-case hex"
    return (
        f"the revision '{parsed.revision}' of hf://{parsed.repo} is not a full commit hash (a branch or a tag "
        f"moves): pin one (`gitops models resolve {parsed.url()}` prints it and the sha256)"
    )


def moving_revision(message: str) -> HubSource | None:
    """The source a `hub_source_problem` message refuses for naming a branch or tag, or None."""
    found = _MOVING.search(message)
    return None if found is None else HubSource(found.group(2).removeprefix("hf://"), found.group(1))


def pinned(source: HubSource, commit: str) -> HubSource:
    return HubSource(source.repo, commit)


def token_path(environ: Mapping[str, str], home: str) -> str:
    """Where a Hub token is kept, as the Hub's own client looks: `HF_TOKEN_PATH`,
    else `HF_HOME/token`, else `~/.cache/huggingface/token` (`home` is `~`)."""
    hf_home = environ.get("HF_HOME") or f"{home.rstrip('/')}/.cache/huggingface"
    return environ.get("HF_TOKEN_PATH") or f"{hf_home.rstrip('/')}/token"


def endpoint_in(environ: Mapping[str, str]) -> str:
    """The Hub `environ` names (`HF_ENDPOINT`, else the public Hub), without a trailing '/';
    ValueError (`endpoint_problem`'s words) when it is no Hub to fetch from."""
    endpoint = environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
    problem = endpoint_problem(endpoint)
    if problem is not None:
        raise ValueError(problem)
    return endpoint.rstrip("/")


def token_in(environ: Mapping[str, str]) -> str | None:
    """The token `environ` gives (`HF_TOKEN`), or None: then the Hub's token file (`token_path`) is read."""
    return environ.get("HF_TOKEN", "").strip() or None


def endpoint_problem(endpoint: str) -> str | None:
    """Why `endpoint` (HF_ENDPOINT) is not a Hub to fetch from, or None: https, or http on loopback."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"HF_ENDPOINT must be an https:// URL (got {endpoint[:80]!r})"
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment:
        return "HF_ENDPOINT must be a plain URL (no credentials, query or fragment)"
    loopback = parts.hostname in ("localhost", "::1") or parts.hostname.startswith("127.")
    if parts.scheme == "http" and not loopback:
        return "HF_ENDPOINT may be http:// only on a loopback host; use https://"
    return None


def revision_url(endpoint: str, source: HubSource) -> str:
    """The Hub API's metadata of a revision, with each file's size and LFS sha256."""
    return f"{endpoint.rstrip('/')}/api/models/{source.repo}/revision/{quote(source.revision, safe='')}?blobs=true"


def file_url(endpoint: str, repo: str, commit: str, path: str) -> str:
    return f"{endpoint.rstrip('/')}/{repo}/resolve/{commit}/{quote(path)}"


def parse_revision(body: Any) -> HubRevision:
    """The Hub's answer to `revision_url` as a commit and its files; ValueError when it is not one."""
    if not isinstance(body, Mapping) or not isinstance(body.get("sha"), str) or not COMMIT.fullmatch(body["sha"]):
        raise ValueError("the Hub's answer names no commit")
    files: list[HubFile] = []
    for sibling in body.get("siblings") or ():
        if not isinstance(sibling, Mapping) or not isinstance(sibling.get("rfilename"), str):
            raise ValueError("the Hub's answer lists a file without a name")
        found = sibling.get("lfs")
        lfs: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        size = lfs.get("size", sibling.get("size"))
        sha256 = lfs.get("sha256")
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"the Hub's answer gives no size for {sibling['rfilename']!r}")
        files.append(HubFile(sibling["rfilename"], size, sha256 if isinstance(sha256, str) else None))
    return HubRevision(body["sha"], tuple(files))


def _matches(path: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(path, p + "*" if p.endswith("/") else p) for p in patterns)


def selected(files: Sequence[HubFile], include: Sequence[str], exclude: Sequence[str]) -> list[HubFile]:
    """The files a model holds: those `include` matches (every file when it is
    empty) that `exclude` does not, sorted by path."""
    chosen = [
        file for file in files
        if (not include or _matches(file.path, include)) and not _matches(file.path, exclude)
    ]
    return sorted(chosen, key=lambda file: file.path)
