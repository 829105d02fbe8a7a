"""What a model's digest is, and which sources a `[models.NAME]` table may name.

A model is weights pinned by digest in git (docs/guides/models.md). Its `sha256`
is, for a single file, the file's sha256; for a directory (a source ending
in `/`), the sha256 of its manifest: one `path\\tsize\\tsha256\\n` line per
file, paths relative to the directory with `/` separators, sorted by path.
The agent (`gitops models digest`, validation) and the replica's cache
(`replica.models`) compute it from the same function here, so the digest a
user commits is the one every node checks. Values only: callers hash the
bytes and list the files.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Iterable
from urllib.parse import urlsplit

from vocabulary.replicas.hub_sources import hub_source_problem
from vocabulary.replicas.oci_sources import oci_source_problem

__all__ = [
    "DIGEST",
    "SCHEMES",
    "ManifestEntry",
    "digest_problem",
    "is_directory",
    "manifest_digest",
    "manifest_text",
    "parse_manifest",
    "short",
    "source_problem",
]

DIGEST = re.compile(r"[0-9a-f]{64}")
SCHEMES = ("s3", "https", "http", "file", "hf", "oci")

# (path relative to the model's directory, size in bytes, sha256 hex)
ManifestEntry = tuple[str, int, str]


def manifest_text(entries: Iterable[ManifestEntry]) -> bytes:
    """The manifest of a directory: `path\\tsize\\tsha256\\n` lines sorted by path."""
    lines = []
    for path, size, digest in sorted(entries):
        if not path or "\t" in path or "\n" in path or path.startswith("/") or ".." in path.split("/"):
            raise ValueError(f"a model file's path must be relative and plain (got {path!r})")
        lines.append(f"{path}\t{size}\t{digest}\n")
    return "".join(lines).encode()


def manifest_digest(entries: Iterable[ManifestEntry]) -> str:
    """A directory model's digest: the sha256 of its manifest."""
    return hashlib.sha256(manifest_text(entries)).hexdigest()


def parse_manifest(text: bytes) -> list[ManifestEntry]:
    """The entries of a manifest `manifest_text` wrote (a cache entry keeps its own)."""
    entries: list[ManifestEntry] = []
    for line in text.decode().splitlines():
        path, size, digest = line.split("\t")
        entries.append((path, int(size), digest))
    return entries


def digest_problem(value: str) -> str | None:
    """Why `value` is not a sha256 digest as a spec writes it, or None."""
    if DIGEST.fullmatch(value):
        return None
    if DIGEST.fullmatch(value.lower()):
        return "must be lower-case hex"
    if value.startswith("sha256:"):
        return "must be the 64 hex digits alone, without 'sha256:'"
    return f"must be 64 hex digits (a sha256; `gitops models digest PATH|URL` prints it), not {len(value)} characters"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def source_problem(source: str) -> str | None:
    """Why `source` cannot be fetched by every node, or None.

    s3://bucket/key (or s3://bucket/prefix/ for a directory), https://host/…,
    file:///absolute/path, hf://ORG/NAME@COMMIT (a directory:
    `vocabulary.replicas.hub_sources`), oci://REGISTRY/REPO@sha256:… (a
    directory: `vocabulary.replicas.oci_sources`); http:// only on a loopback host
    (tests and a server on every node), since nothing else would protect the
    bytes in transit before they are verified. No credentials in the URL:
    they come from the node's environment (or, for hf:// and oci://, a secret).
    """
    if source.startswith("hf://"):
        return hub_source_problem(source)
    if source.startswith("oci://"):
        return oci_source_problem(source)
    parts = urlsplit(source)
    scheme = parts.scheme
    if scheme not in SCHEMES:
        return f"must be an s3://, https://, hf://, oci:// or file:/// URL (got scheme '{scheme or 'none'}')"
    if parts.username is not None or parts.password is not None:
        return "must not hold credentials; S3 takes them from the node's AWS_* variables"
    if parts.query or parts.fragment:
        return "must have no query or fragment"
    if scheme == "file":
        if parts.netloc or not parts.path.startswith("/"):
            return "file:// needs an absolute path (file:///data/models/…)"
    elif not parts.hostname:
        return f"{scheme}:// needs a {'bucket' if scheme == 's3' else 'host'}"
    if scheme == "http" and not _loopback(parts.hostname or ""):
        return "http:// is allowed only on a loopback host (127.0.0.1, ::1, localhost); use https://"
    if scheme == "s3" and parts.path in ("", "/"):
        return "s3:// needs a key or a prefix ending in '/' after the bucket"
    if scheme in ("http", "https") and is_directory(source):
        return f"{scheme}:// names a single file (a directory can come from s3:// or file:///)"
    return None


def is_directory(source: str) -> bool:
    """A source ending in `/` is a directory (its digest is a manifest's), and so is an hf:// or oci:// one."""
    return source.startswith(("hf://", "oci://")) or urlsplit(source).path.endswith("/")


def short(digest: str) -> str:
    """`9f86…` as plans print a digest."""
    return f"{digest[:4]}…" if digest else "none"
